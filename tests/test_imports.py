"""A command imports what it uses (invariant 13): a no-op `reindex plan` and `reindex status` on the embedded
default store load neither qdrant-client (a server or local-mode store only), nor sentence-transformers /
torch (only when a text is embedded), nor Prefect (only for a Prefect runner or flow), nor boto3 (S3 state)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers_index import Workspace, subprocess_env

HEAVY = ("qdrant_client", "sentence_transformers", "torch", "transformers", "prefect", "boto3", "httpx")

# Runs one CLI command in this process, then prints which of HEAVY it left in sys.modules.
_PROBE = """
import json, sys
from reindex.cli import main
try:
    main(sys.argv[2:])
except SystemExit as exit:
    code = exit.code
heavy = json.loads(sys.argv[1])  # top-level packages, or dotted modules of reindex's own
tops = {m.split(".")[0] for m in sys.modules}
print(json.dumps({"code": code, "loaded": sorted(h for h in heavy if h in tops or h in sys.modules)}))
"""


def _loaded_by(ws: Workspace, *args: str, heavy: tuple[str, ...] = HEAVY) -> dict:
    env = subprocess_env()
    env.pop("PREFECT_API_URL", None)
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(heavy), *args, "-c", str(ws.config)], cwd=ws.root,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_no_op_plan_and_status_import_no_store_client_model_or_prefect(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    # Nor the tokenizer (the tokenizers library and MiniLM's tokenizer.json, ~0.06 CPU-s): a no-op plan cuts no text.
    # Nor the engine's cutover and shard execution (a plan restores a missing live record with them, only then).
    plan = _loaded_by(ws, "plan", "--out", str(ws.plans),
                      heavy=HEAVY + ("tokenizers", "reindex.decisions.cutover", "reindex.engine.execution"))
    assert plan == {"code": 0, "loaded": []}  # exit 0: nothing to do
    status = _loaded_by(ws, "status", heavy=HEAVY + ("tokenizers",))
    assert status == {"code": 0, "loaded": []}


def test_planning_with_the_default_model_imports_it_only_to_measure_its_rate(tmp_path: Path) -> None:
    """The default vector half (sentence-transformers): planning counts tokens with the model's tokenizer
    and fingerprints with its file digest. The model itself (torch) is loaded only to measure the rate of a model
    nothing has measured yet (a short sampled calibration, recorded: issue 32 item 6), or when a text is
    embedded; with a rate in the config or on record, planning loads nothing."""
    ws = Workspace(tmp_path / "ws")
    ws.config.write_text("index: docs\nsource: ./corpus\n", encoding="utf-8")
    first = _loaded_by(ws, "plan", "--out", str(ws.plans))
    assert first["code"] == 2 and "torch" in first["loaded"]  # exit 2: an initial build planned; rate sampled
    again = _loaded_by(ws, "plan", "--out", str(ws.plans))
    assert again == {"code": 2, "loaded": []}  # the sampled rate is on record now
    ws.config.write_text("index: docs\nsource: ./corpus\ncost: {tokens_per_minute: 100000}\n", encoding="utf-8")
    assert _loaded_by(ws, "plan", "--out", str(ws.plans)) == {"code": 2, "loaded": []}
