"""The cost model: seed 001's golden numbers, footprint formulas worked by hand, the sampling
projection, histogram files, and error cases."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from reindex.domain.config import FixedChunkerConfig, RecursiveChunkerConfig, SlidingChunkerConfig
from reindex.cost import (
    Bucket,
    Footprint,
    Usage,
    Window,
    Work,
    allocate_sample,
    billed_tokens,
    bootstrap_interval,
    chunk_count,
    estimate_histogram,
    histogram_of,
    hours,
    payload_bytes,
    population_usage,
    price,
    project_total,
    stratum_of,
    usd,
    vector_bytes,
    window_of,
)
from reindex.errors import ConfigError
from reindex.cost.histogram_csv import read_histogram

CASES = Path(__file__).parent / "cases"

# Seed 001's BUCKETS: (documents, representative length in tokens).
BUCKETS = [
    Bucket(2_400_000, 180),
    Bucket(1_600_000, 380),
    Bucket(2_000_000, 900),
    Bucket(1_440_000, 2_400),
    Bucket(560_000, 9_000),
]
OLD = SlidingChunkerConfig(size=512, overlap=0.1)
NEW = SlidingChunkerConfig(size=256, overlap=0.2)


@pytest.fixture(scope="module")
def seed001():
    return estimate_histogram(BUCKETS, OLD, NEW, usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384)


# --------------------------------------------------------------------------------------------
# Window arithmetic, per bucket, worked by hand
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "old_chunks", "old_billed", "new_chunks", "new_billed"),
    [
        # 512/10 %: stride int(460.8) = 460, 51 repeated tokens; 256/20 %: stride int(204.8) = 204, 51 repeated.
        (180, 1, 180, 1, 180),
        (380, 1, 380, 2, 380 + 51),  # new: 1 + ceil(124/204) = 2
        (900, 2, 900 + 51, 5, 900 + 4 * 51),  # old: 1 + ceil(388/460) = 2; new: 1 + ceil(644/204) = 5
        (2_400, 6, 2_400 + 5 * 51, 12, 2_400 + 11 * 51),  # 1 + ceil(1888/460) = 6; 1 + ceil(2144/204) = 12
        (9_000, 20, 9_000 + 19 * 51, 44, 9_000 + 43 * 51),  # 1 + ceil(8488/460) = 20; 1 + ceil(8744/204) = 44
    ],
)
def test_seed001_buckets_by_hand(length, old_chunks, old_billed, new_chunks, new_billed):
    assert chunk_count(length, 512, 0.10) == old_chunks
    assert billed_tokens(length, 512, 0.10) == old_billed
    assert chunk_count(length, 256, 0.20) == new_chunks
    assert billed_tokens(length, 256, 0.20) == new_billed


def test_window_edges():
    assert chunk_count(256, 256, 0.2) == 1  # exactly one window
    assert chunk_count(257, 256, 0.2) == 2
    assert chunk_count(0, 256, 0.2) == 0  # an empty document makes no chunk
    assert billed_tokens(0, 256, 0.2) == 0
    assert chunk_count(1024, 256, 0.0) == 4 and billed_tokens(1024, 256, 0.0) == 1024


# --------------------------------------------------------------------------------------------
# Seed 001 golden numbers
# --------------------------------------------------------------------------------------------


def test_seed001_vectors(seed001):
    assert round(seed001.chunks_old / 1e6, 2) == 27.84
    assert round(seed001.chunks_new / 1e6, 2) == 57.52
    assert round(seed001.ratio, 2) == 2.07
    assert seed001.documents == 8_000_000


def test_seed001_tokens(seed001):
    assert round(seed001.tokens_billed_old / 1e9, 3) == 12.348
    assert round(seed001.tokens_full_reembed / 1e9, 3) == 13.862
    # The 2.4 M documents of 180 tokens are one identical chunk under both configs.
    assert seed001.tokens_reused == 2_400_000 * 180
    assert seed001.chunks_reused == 2_400_000
    assert round(seed001.tokens_to_embed / 1e9, 3) == 13.430
    assert seed001.tokens_to_embed == seed001.tokens_full_reembed - seed001.tokens_reused


def test_seed001_money_and_time(seed001):
    assert round(seed001.usd, 2) == 268.59
    assert round(seed001.hours, 2) == 63.95


def test_seed001_peak(seed001):
    assert round(seed001.peak_vectors / 1e6, 2) == 85.36
    assert seed001.peak_vectors == seed001.chunks_old + seed001.chunks_new
    assert seed001.cost.vectors_embedded == seed001.chunks_new - 2_400_000


def test_seed001_sensitivity(seed001):
    s = seed001.sensitivity
    assert round(s.chunks_no_overlap / 1e6, 2) == 48.16
    assert round(s.tail_chunks / 1e6, 2) == 24.64
    assert round(s.tail_document_share, 2) == 0.07  # "the 7 % of documents longer than 4,000 tokens"
    assert round(s.tail_chunk_share, 3) == round(24.64 / 57.52, 3)
    # At 0 % overlap only the corpus itself is billed.
    assert s.tokens_no_overlap == seed001.corpus_tokens


def test_seed001_what_if(seed001):
    rows = {(r.window.size, r.window.overlap): r for r in seed001.sensitivity.what_if}
    assert set(rows) == {(s, o) for s in (128, 256, 384, 512) for o in (0.0, 0.1, 0.2)}
    chosen = rows[(256, 0.2)]
    assert (chosen.chunks, chosen.tokens_to_embed, chosen.vectors_peak) == (
        seed001.chunks_new,
        seed001.tokens_to_embed,
        seed001.peak_vectors,
    )
    assert rows[(256, 0.0)].chunks == seed001.sensitivity.chunks_no_overlap
    # The old config itself re-cuts nothing: every window is identical, so everything is reused.
    assert rows[(512, 0.1)].tokens_to_embed == 0 and rows[(512, 0.1)].usd == 0.0
    assert rows[(512, 0.1)].ratio == 1.0


def test_windows_from_configs_and_windows_agree(seed001):
    same = estimate_histogram(
        BUCKETS, Window("sliding", 512, 0.1), Window("sliding", 256, 0.2), usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384
    )
    assert same == seed001
    assert window_of(FixedChunkerConfig(size=300)) == Window("fixed", 300, 0.0)
    assert Window("sliding", 256, 0.2).label() == "sliding:size=256,overlap=0.2"


def test_fixed_is_sliding_without_overlap():
    kw = dict(usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384)
    fixed = estimate_histogram(BUCKETS, OLD, FixedChunkerConfig(size=256), **kw)
    sliding = estimate_histogram(BUCKETS, OLD, SlidingChunkerConfig(size=256, overlap=0.0), **kw)
    assert fixed.chunks_new == sliding.chunks_new == 48_160_000
    assert fixed.tokens_to_embed == sliding.tokens_to_embed
    # A fixed chunker has no overlap to vary: its what-if rows are sizes only.
    assert {r.window.overlap for r in fixed.sensitivity.what_if} == {0.0}
    assert {r.window.kind for r in fixed.sensitivity.what_if} == {"fixed"}


def test_vector_change_reuses_nothing():
    est = estimate_histogram(
        BUCKETS, OLD, NEW, usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384, same_vectors=False
    )
    assert est.tokens_reused == 0 and est.chunks_reused == 0
    assert est.tokens_to_embed == est.tokens_full_reembed
    # A model change with the same chunker re-embeds everything the old config billed.
    same_chunker = estimate_histogram(
        BUCKETS, OLD, OLD, usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384, same_vectors=False
    )
    assert same_chunker.tokens_to_embed == same_chunker.tokens_billed_old


def test_unchanged_chunker_costs_nothing():
    est = estimate_histogram(BUCKETS, OLD, OLD, usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384)
    assert est.tokens_to_embed == 0 and est.usd == 0.0 and est.hours == 0.0
    assert est.chunks_reused == est.chunks_new == est.chunks_old


def test_histogram_of_lengths_is_exact():
    lengths = [180, 180, 900, 0]
    est = estimate_histogram(histogram_of(lengths), OLD, NEW, usd_per_mtok=1.0, tokens_per_minute=60.0, dimension=8)
    # 180 → 1 + 1 chunks; 900 → 5; the empty document → none.
    assert est.chunks_new == 7
    assert est.tokens_reused == 360  # the two 180-token documents
    assert est.tokens_to_embed == 900 + 4 * 51
    assert est.hours == pytest.approx((900 + 4 * 51) / 60 / 60)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def test_content_defined_chunkers_need_sampling():
    with pytest.raises(ConfigError) as err:
        estimate_histogram(BUCKETS, OLD, RecursiveChunkerConfig(), usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384)
    assert str(err.value) == (
        "histogram estimates need window arithmetic (fixed or sliding chunkers), but the new chunker is 'recursive'; "
        "use `reindex plan --sample N` to measure it on a sample of documents instead"
    )


def test_window_that_never_advances():
    with pytest.raises(ConfigError, match="never advances"):
        chunk_count(100, 1, 0.5)  # stride int(0.5) = 0


def test_empty_histogram():
    with pytest.raises(ConfigError, match="no documents"):
        estimate_histogram([Bucket(0, 100)], OLD, NEW, usd_per_mtok=0.02, tokens_per_minute=3.5e6, dimension=384)


@pytest.mark.parametrize(
    "call",
    [
        lambda: Bucket(-1, 10),
        lambda: chunk_count(-1, 256, 0.2),
        lambda: chunk_count(10, 0, 0.2),
        lambda: chunk_count(10, 256, 1.0),
        lambda: Window("fixed", 256, 0.2),
        lambda: hours(10, 0),
        lambda: usd(10, -1.0),
        lambda: population_usage(10, 384, 0, "bfloat16"),  # type: ignore[arg-type]
        lambda: Work(10, 10, 11, 0, 0, 0, 384),  # more reused than exist
    ],
)
def test_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


# --------------------------------------------------------------------------------------------
# Money, time, bytes
# --------------------------------------------------------------------------------------------


def test_money_and_time():
    assert usd(1_000_000, 0.02) == pytest.approx(0.02)
    assert hours(3_500_000 * 60, 3.5e6) == pytest.approx(1.0)
    assert vector_bytes(10, 384, 4) == 15_360
    assert payload_bytes(3, 1_000) == 1_600  # 1,000 text bytes + 3 × 200 bytes of fields


def test_footprint_float32_matches_qdrant_worked_example():
    # Qdrant's capacity-planning page: 1,000,000 × 1024 × 4 bytes × 1.5 = 6,144,000,000 bytes.
    u = population_usage(1_000_000, 1024, payload=1_000_000_000)
    assert u.ram_bytes == 6_144_000_000
    # disk: the same 6.144e9 for vectors with their persisted index, plus 1e9 of payload.
    assert u.disk_bytes == 7_144_000_000


def test_footprint_float16_and_int8():
    # float16: 1e6 × 1024 × 2 × 1.5 = 3.072e9 in RAM and on disk (+ payload 0).
    assert population_usage(1_000_000, 1024, 0, "float16") == Usage(3_072_000_000, 3_072_000_000)
    # int8: RAM holds the quantised copy, 1e6 × 1024 × 1 × 1.5 = 1.536e9; disk keeps the float32
    # originals with their index (6.144e9) plus the quantised copy (1.024e9) plus payload (5).
    assert population_usage(1_000_000, 1024, 5, "int8") == Usage(1_536_000_000, 7_168_000_005)


def test_price_peak_is_both_populations():
    # A model change 384 → 768 dims: 1,000 old points, 1,200 new, none reused.
    work = Work(
        chunks_old=1_000,
        chunks_new=1_200,
        chunks_reused=0,
        tokens_to_embed=300_000,
        payload_bytes_old=100_000,
        payload_bytes_new=120_000,
        dimension=768,
        dimension_old=384,
    )
    cost = price(work, usd_per_mtok=0.10, tokens_per_minute=10_000)
    assert cost.usd == pytest.approx(0.03)
    assert cost.hours == pytest.approx(0.5)  # 300,000 / 10,000 = 30 minutes
    assert cost.vectors_peak == 2_200 and cost.vectors_embedded == 1_200
    # old RAM: 1,000 × 384 × 4 × 1.5 = 2,304,000; new RAM: 1,200 × 768 × 4 × 1.5 = 5,529,600.
    assert cost.footprint.old.ram_bytes == 2_304_000
    assert cost.footprint.new.ram_bytes == 5_529_600
    assert cost.footprint.peak.ram_bytes == 2_304_000 + 5_529_600
    assert cost.footprint.peak.disk_bytes == (2_304_000 + 100_000) + (5_529_600 + 120_000)


def test_seed001_footprint(seed001):
    fp = seed001.footprint
    # 27.84 M × 384 × 4 × 1.5 bytes of RAM before; 57.52 M × 384 × 4 × 1.5 after.
    assert fp.old.ram_bytes == 27_840_000 * 384 * 6
    assert fp.new.ram_bytes == 57_520_000 * 384 * 6
    assert fp.peak == Usage(fp.old.ram_bytes + fp.new.ram_bytes, fp.old.disk_bytes + fp.new.disk_bytes)
    # Payload estimate: 4 bytes per billed token + 200 bytes of fields per chunk.
    assert fp.old.disk_bytes == 27_840_000 * 384 * 6 + 12_347_840_000 * 4 + 27_840_000 * 200


# --------------------------------------------------------------------------------------------
# Length-stratified sampling
# --------------------------------------------------------------------------------------------


def test_project_total_by_hand():
    # Stratum a: 100 documents, sample mean 2 → 200; stratum b: 10 documents, mean 10 → 100.
    assert project_total({"a": [1, 3], "b": [8, 12]}, {"a": 100, "b": 10}) == 300.0
    # An empty stratum contributes nothing and needs no sample.
    assert project_total({"a": [1, 3]}, {"a": 100, "b": 0}) == 200.0


def test_fully_sampled_strata_are_exact():
    iv = bootstrap_interval({"a": [1, 2, 3]}, {"a": 3}, seed=7, resamples=50)
    assert (iv.estimate, iv.low, iv.high) == (6.0, 6.0, 6.0)


def test_bootstrap_is_seeded_and_order_free():
    samples = {0: [1.0, 5.0, 9.0, 2.0], 1: [30.0, 40.0, 45.0]}
    sizes = {0: 40, 1: 9}
    a = bootstrap_interval(samples, sizes, seed=3, resamples=200)
    b = bootstrap_interval(dict(reversed(samples.items())), dict(reversed(sizes.items())), seed=3, resamples=200)
    assert a == b
    assert a.low <= a.estimate <= a.high
    assert bootstrap_interval(samples, sizes, seed=4, resamples=200) != a


def test_bootstrap_interval_covers_a_known_total():
    # A synthetic corpus with a long tail; the quantity is chunks at 256/20 %.
    rng = random.Random(12345)
    lengths = [max(1, int(rng.lognormvariate(6.5, 1.2))) for _ in range(20_000)]
    values = [chunk_count(n, 256, 0.2) for n in lengths]
    truth = sum(values)
    strata: dict[int, list[int]] = {}
    for n, v in zip(lengths, values):
        strata.setdefault(stratum_of(n), []).append(v)
    sizes = {k: len(v) for k, v in strata.items()}
    alloc = allocate_sample(sizes, 300)
    covered = 0
    for seed in range(100):
        draw = random.Random(seed)
        sample = {k: draw.sample(strata[k], alloc[k]) for k in strata}
        covered += bootstrap_interval(sample, sizes, seed=seed, resamples=200).covers(truth)
    assert covered >= 90


def test_sampling_errors():
    with pytest.raises(ValueError, match="none was sampled"):
        project_total({"a": [1]}, {"a": 5, "b": 3})
    with pytest.raises(ValueError, match="no size"):
        project_total({"a": [1], "c": [2]}, {"a": 5})
    with pytest.raises(ValueError, match="only 1 documents"):
        project_total({"a": [1, 2]}, {"a": 1})
    with pytest.raises(ValueError):
        bootstrap_interval({"a": [1]}, {"a": 5}, seed=1, confidence=1.0)


def test_strata_and_allocation():
    assert [stratum_of(n) for n in (0, 511, 512, 2047, 2048, 10**6)] == [0, 0, 1, 1, 2, 4]
    alloc = allocate_sample({"short": 900, "mid": 90, "long": 10}, 100)
    assert sum(alloc.values()) == 100
    assert alloc["long"] >= 2 and alloc["short"] > alloc["mid"] > alloc["long"]
    # Never more than a stratum holds; a stratum of one gets its one document.
    assert allocate_sample({"a": 1, "b": 1_000}, 50) == {"a": 1, "b": 49}
    assert allocate_sample({"a": 3, "b": 4}, 100) == {"a": 3, "b": 4}


# --------------------------------------------------------------------------------------------
# Histogram files
# --------------------------------------------------------------------------------------------


def test_read_seed001_histogram():
    assert read_histogram(CASES / "seed001_buckets.csv") == BUCKETS


def test_histogram_tolerates_comments_order_and_separators(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("\ufeff# lengths from prod, 2026-01\n tokens , documents \n\n180,2_400_000\n", encoding="utf-8")
    assert read_histogram(p) == [Bucket(2_400_000, 180)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "{p}: empty histogram; expected a header `documents,tokens` and one row per bucket"),
        ("docs,len\n1,2\n", "{p}:1: expected the header `documents,tokens`, got `docs,len`"),
        ("documents,tokens\n", "{p}: the histogram has a header but no buckets"),
        ("documents,tokens\n10,180\n10,1.5e3\n", "{p}:3: tokens must be a whole number, got `1.5e3`"),
        ("documents,tokens\n-4,180\n", "{p}:2: documents must be >= 0, got -4"),
        ("documents,tokens\n# note\n10\n", "{p}:3: expected 2 values (documents,tokens), got 1: `10`"),
    ],
)
def test_histogram_errors_name_file_and_line(tmp_path, content, message):
    p = tmp_path / "h.csv"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_histogram(p)
    assert str(err.value) == message.format(p=p)


def test_missing_histogram_file(tmp_path):
    with pytest.raises(ConfigError, match="histogram file not found"):
        read_histogram(tmp_path / "nope.csv")


# --- footprint per backend (issue 14): the plan describes the store the config actually uses ---------------

MIB = 2**20


def test_edge_population_usage_worked_by_hand():
    from reindex.cost import population_usage as pu

    # 300,000 points × 384 dims, float32, 0 payload: reader RAM = 65 MiB + 300k × (1,536 + 290) B;
    # bench/scale.py measured 586 MiB of reader RSS at this size: within 5 %.
    u = pu(300_000, 384, 0, "float32", "edge")
    assert u.ram_bytes == 65 * MIB + 300_000 * 1_826
    assert u.disk_bytes == 300_000 * 1_826
    assert abs(u.ram_bytes / MIB - 586) / 586 < 0.05
    # bench/footprint.py: 180,030 PEP chunks (174.6 MB of payload as the plan counts it) took 455 MiB of
    # allocated disk after the HNSW build; the formula (payload uncompressed) may be above, by < 10 %.
    d = pu(180_030, 384, 174_600_000, "float32", "edge").disk_bytes / MIB
    assert 455 <= d < 455 * 1.10
    # int8: one byte per component searched, float32 originals + the quantised copy on disk.
    q = pu(1_000, 100, 7, "int8", "edge")
    assert q.ram_bytes == 65 * MIB + 1_000 * (100 + 290)
    assert q.disk_bytes == 1_000 * (400 + 290) + 1_000 * 100 + 7
    assert pu(0, 384, 0, "float32", "edge") == Usage(0, 0)


def test_local_mode_usage_is_per_component_and_matches_the_measurement():
    from reindex.cost import population_usage as pu

    u = pu(30_103, 384, 1_000 * 30_103, "float32", "local")
    assert u.ram_bytes == 30_103 * 384 * 76
    assert u.disk_bytes == 30_103 * (384 * 8 + 900) + 30_103_000
    assert abs(u.ram_bytes / MIB - 844) / 844 < 0.05  # 844 MiB RSS measured right after opening
    assert abs(u.disk_bytes / MIB - 143) / 143 < 0.05


def test_edge_build_usage_matches_the_measured_apply():
    from reindex.cost import build_usage

    b = build_usage(180_030, 384, 174_600_000, "float32", "edge")
    assert b.ram_bytes == 129 * MIB + 180_030 * (5 * 1_536 + 290) + 2 * 174_600_000
    assert b.disk_bytes == 2 * population_usage(180_030, 384, 174_600_000, backend="edge").disk_bytes
    # bench/footprint.py at 10×: apply's RSS over an idle process 1,819 MiB, the store folder's peak 898 MiB
    assert abs(b.ram_bytes / MIB - 1_819) / 1_819 < 0.05
    assert 898 <= b.disk_bytes / MIB < 898 * 1.15
    # at 1× (18,003 points, 17.5 MB of payload): 298 MiB and 90 MiB
    small = build_usage(18_003, 384, 17_460_000, "float32", "edge")
    assert abs(small.ram_bytes / MIB - 298) / 298 < 0.05 and 90 <= small.disk_bytes / MIB < 90 * 1.15
    # server and local: building costs what serving costs
    assert build_usage(10, 8, 0, "float32", "server") == population_usage(10, 8, 0)


def test_footprint_modes_per_backend():
    from reindex.cost import build_usage, footprint

    w = Work(chunks_old=1_000, chunks_new=1_200, chunks_reused=900, tokens_to_embed=5, payload_bytes_old=10,
             payload_bytes_new=20, dimension=384)
    old_e, new_e = population_usage(1_000, 384, 10, backend="edge"), population_usage(1_200, 384, 20, backend="edge")
    built_e = build_usage(1_200, 384, 20, backend="edge")
    assert footprint(w, "shadow", backend="edge") == (2_200, Footprint(old_e, new_e, old_e + built_e))
    assert footprint(w, "initial", backend="edge") == (1_200, Footprint(old_e, new_e, built_e))
    # in place on edge: readers keep the published generation while the writer fills a copy of it
    copy = population_usage(1_000 + 300, 384, 20, backend="edge")
    assert footprint(w, "in-place", added_points=300, backend="edge") == (1_300, Footprint(old_e, new_e, old_e + copy))
    # in place on a server: old + the added points, at least the new population
    old_s, new_s = population_usage(1_000, 384, 10), population_usage(1_200, 384, 20)
    extra = population_usage(300, 384, 0)
    grown = old_s + extra
    assert footprint(w, "in-place", added_points=300, backend="server") == (
        1_300, Footprint(old_s, new_s, Usage(max(grown.ram_bytes, new_s.ram_bytes), max(grown.disk_bytes, new_s.disk_bytes))))
    assert footprint(w, "shadow")[1].peak == old_s + new_s
    with pytest.raises(ValueError, match="backend"):
        population_usage(1, 1, 0, backend="faiss")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        footprint(w, "blue-green")  # type: ignore[arg-type]
