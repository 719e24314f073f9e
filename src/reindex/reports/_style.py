"""The stylesheet shared by the plan and cutover HTML pages."""

from __future__ import annotations

__all__ = ["CSS"]

CSS = """
*{box-sizing:border-box}body{margin:0;background:#f1f5f9;color:#0f172a;
font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 28px 48px}
header h1{font-size:24px;margin:0 0 4px;letter-spacing:-.01em}header .meta{color:#475569;font-size:13px}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#e2e8f0;padding:1px 5px;border-radius:4px}
.badge{display:inline-block;padding:2px 10px;border-radius:999px;font-size:12px;font-weight:600;vertical-align:middle;
color:#fff;margin-left:8px}.k-none{background:#64748b}.k-initial{background:#0284c7}.k-document-scoped{background:#059669}
.k-pipeline-scoped-text{background:#d97706}.k-pipeline-scoped-vector{background:#dc2626}
.cards{display:grid;grid-template-columns:repeat(5,1fr);gap:14px;margin:20px 0}
.card{background:#fff;border-radius:12px;padding:14px 16px;box-shadow:0 1px 2px #0f172a14,0 4px 12px #0f172a0d}
.card .label{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:#64748b;font-weight:600}
.card .value{font-size:26px;font-weight:700;margin:2px 0;letter-spacing:-.02em;white-space:nowrap}
.card .sub{font-size:12px;color:#475569}.card.accent{background:#312e81;color:#fff}
.card.accent .label,.card.accent .sub{color:#c7d2fe}
.banner{border-radius:10px;padding:10px 16px;margin:0 0 16px;font-weight:500}
.banner.warn{background:#fef3c7;border:1px solid #fcd34d;color:#78350f}.banner.ok{background:#dcfce7;border:1px solid #86efac;color:#14532d}
.banner ul{margin:4px 0 0;padding-left:20px;font-weight:400}
section{background:#fff;border-radius:12px;padding:16px 20px;margin:0 0 16px;box-shadow:0 1px 2px #0f172a14}
section h2{font-size:16px;margin:0 0 10px}section ul{margin:0;padding-left:20px}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:16px;margin:0 0 16px}
figure.chart{margin:0;background:#fff;border-radius:12px;padding:14px 14px 10px;box-shadow:0 1px 2px #0f172a14}
figure.chart svg{width:100%;height:auto;display:block}figcaption{font-weight:600;font-size:14px;margin:0 0 6px;color:#1e293b}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#475569;margin-top:4px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.nodata{height:200px;display:flex;align-items:center;justify-content:center;color:#94a3b8;font-style:italic;
border:1px dashed #cbd5e1;border-radius:8px;text-align:center;padding:0 20px}
svg .grid{stroke:#e2e8f0}svg .axis{stroke:#94a3b8}svg .tick{font-size:10.5px;fill:#64748b}
svg .axis-label{font-size:11px;fill:#475569}svg .row-label{font-size:12.5px;font-weight:600;fill:#334155}
svg .in-bar{font-size:12px;font-weight:600;fill:#fff}svg .in-bar.dark{fill:#334155}svg .track{fill:#f1f5f9}
svg .area{opacity:.55}svg .line{fill:none;stroke:#1e1b4b;stroke-width:2}
svg circle.mark{fill:#fff;stroke:#1e1b4b;stroke-width:2}svg circle.peak{fill:#e11d48;stroke:#fff}
svg .window{fill:#fde68a;opacity:.35}svg .peak-label{font-size:13px;font-weight:700;fill:#e11d48}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e2e8f0}
th{color:#475569;font-weight:600;background:#f8fafc}td.num,th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.current td{background:#eef2ff;font-weight:600}.two{display:grid;grid-template-columns:1fr 1fr;gap:16px}
td:first-child{white-space:nowrap;color:#334155;font-weight:500}ul.ids{columns:4 180px;column-gap:24px}ul.ids li{break-inside:avoid}.muted{color:#64748b;font-size:12.5px}footer{color:#64748b;font-size:12px;margin-top:18px}
@media (max-width:900px){.cards{grid-template-columns:repeat(2,1fr)}.charts,.two{grid-template-columns:1fr}}
"""
