"""``reindex measure --from-git … --rechunk sticky --chains N`` (issue 16): revision chains from a real
git history, sticky against stateless, with the stateless figures recomputed here by hand."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import reindex
from reindex.adapters.chunkers import make_chunker
from reindex.cli import main
from reindex.adapters.tokenizers import load_tokenizer

SAMPLE = Path(reindex.__file__).resolve().parent / "sample"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository whose ``doc.rst`` has 7 texts: a real PEP, then six small edits at different places,
    and ``other.rst`` with 2 texts (too short a history to be followed)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    base = (SAMPLE / "corpus" / "pep-0687.rst").read_text(encoding="utf-8")
    paras = base.split("\n\n")
    texts = [base]
    for k in range(6):
        p = list(paras)
        at = (k * 7 + 3) % len(p)
        p[at] = p[at] + f" (revised in round {k})"
        paras = p
        texts.append("\n\n".join(p))
    for i, text in enumerate(texts):
        (repo / "doc.rst").write_text(text, encoding="utf-8")
        if i < 2:
            (repo / "other.rst").write_text(f"Another document, revision {i}.\n" * 40, encoding="utf-8")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"revision {i}")
    return repo, texts


def test_chains_measure_sticky_against_a_hand_computed_stateless_cut(history: tuple[Path, list[str]]) -> None:
    repo, texts = history
    res = CliRunner().invoke(main, ["measure", "--from-git", str(repo), "--paths", "*.rst", "--rechunk", "sticky",
                                    "--chains", "6", "--chunker", "recursive:size=120", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [c["chain"] for c in out["chains"]] == ["en:doc.rst"]  # other.rst has 2 texts only
    (c,) = out["chunkers"]
    assert c["spec"] == "recursive:size=120" and c["bounds"]["hi"] == 120
    (chain,) = c["per_chain"]
    assert chain["revisions"] == 6 == len(chain["rc_sticky"]) == len(chain["rc_stateless"])

    tok = load_tokenizer("all-MiniLM-L6-v2")
    chunker = make_chunker("recursive:size=120", tok)
    stateless, whole, previous = 0, 0, set()
    for k, text in enumerate(texts):
        cut = list(dict.fromkeys(ch.text for ch in chunker.chunk(text)))
        if k:
            stateless += sum(tok.count_batch([t for t in cut if t not in previous]) or [0])
            whole += sum(tok.count_batch(cut))
        previous = set(cut)
    assert chain["tokens_stateless"] == stateless and chain["tokens_whole_documents"] == whole
    # Each revision edits one paragraph: sticky keeps every untouched chunk, so it embeds less than a fresh cut.
    assert 0 < chain["tokens_sticky"] < chain["tokens_stateless"] < chain["tokens_whole_documents"]
    s = c["summary"]["en"]
    assert (s["tokens_sticky"], s["tokens_stateless"], s["revisions"]) == (chain["tokens_sticky"], stateless, 6)


def test_chains_refuse_what_does_not_apply(history: tuple[Path, list[str]]) -> None:
    repo, _ = history
    runner = CliRunner()
    stateless = runner.invoke(main, ["measure", "--from-git", str(repo), "--paths", "*.rst", "--chains", "3"])
    assert stateless.exit_code == 64 and "--rechunk sticky" in stateless.output
    pairs = runner.invoke(main, ["measure", "--from-git", str(repo), "--paths", "*.rst", "--rechunk", "sticky",
                                 "--chains", "3", "--band", "<=5%"])
    assert pairs.exit_code == 64
    too_long = runner.invoke(main, ["measure", "--from-git", str(repo), "--paths", "*.rst", "--rechunk", "sticky",
                                    "--chains", "9"])
    assert too_long.exit_code != 0 and "no file has 10 distinct texts" in too_long.output
