"""Hand mutations of the gate's critical lines (issue 41): apply one at a time, run the gate's tests, expect a failure;
restore. Usage: .venv/bin/python bench/hand_mutations.py [TEST FILES...]"""
import subprocess, sys, os
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
MUTS = [
 ("src/reindex/decisions/gate.py", "    if high < (max(bound, 0.0) if worse_fails else bound):", "    if high < (min(bound, 0.0) if worse_fails else bound):"),
 ("src/reindex/decisions/gate.py", "    if high < (max(bound, 0.0) if worse_fails else bound):", "    if high <= (max(bound, 0.0) if worse_fails else bound) and False:"),
 ("src/reindex/decisions/gate.py", "    if blind and (ceiling or low == high):", "    if blind and (low == high):"),
 ("src/reindex/decisions/gate.py", "    return {**out, \"outcome\": \"pass\" if low >= bound else \"cannot tell\"}", "    return {**out, \"outcome\": \"pass\" if high >= bound else \"cannot tell\"}"),
 ("src/reindex/decisions/gate.py", "    allowed = _pol(policy, \"cannot_tell\", \"fail\") == \"pass\"\n    worse =", "    allowed = _pol(policy, \"cannot_tell\", \"fail\") != \"fail\" or True\n    worse ="),
 ("src/reindex/decisions/gate.py", "    ok = ratio <= limit or new[\"latency_ms_p95\"] - old[\"latency_ms_p95\"] < LATENCY_SLACK_MS", "    ok = True"),
 ("src/reindex/decisions/gate.py", "    needed = math.ceil(n * (half / target) ** 2) if n and half > 0 and target > 0 else None", "    needed = math.ceil(n * (half / target)) if n and half > 0 and target > 0 else None"),
 ("src/reindex/decisions/index_health.py", "    if r is not None and r < min_recall:", "    if r is not None and r < min_recall - 0.5:"),
 ("src/reindex/decisions/index_health.py", "    if not health[\"ready\"]:", "    if False:"),
 ("src/reindex/decisions/evaluation.py", "                row[\"latency_new_ms\"] = min(row[\"latency_new_ms\"], _search_ms(store, new, v_new[i], k))", "                row[\"latency_new_ms\"] = min(row[\"latency_new_ms\"], _search_ms(store, old, v_new[i], k))"),
]
TESTS = sys.argv[1:] or ["tests/test_gate_rules.py", "tests/test_index_health.py", "tests/test_policy_bounds.py", "tests/test_evaluation.py"]
env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", TOKENIZERS_PARALLELISM="false")
killed = 0
for i, (f, a, b) in enumerate(MUTS):
    p = ROOT / f
    src = p.read_text()
    assert src.count(a) == 1, (f, a)
    p.write_text(src.replace(a, b))
    try:
        r = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS], cwd=ROOT, env=env, capture_output=True, text=True)
    finally:
        p.write_text(src)
    dead = r.returncode != 0
    killed += dead
    last = [l for l in r.stdout.splitlines() if "passed" in l or "failed" in l][-1:]
    print(f"{i:2d} {'KILLED' if dead else 'SURVIVED'} {f}: {b.strip()[:90]}  {last}", flush=True)
print(f"{killed}/{len(MUTS)} killed")
