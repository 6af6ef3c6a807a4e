"""tools/perf/shapes.py: config.json -> linear shapes (GQA, tensor parallelism), shape and M lists."""

from __future__ import annotations

import json

import pytest

from tools.perf.shapes import (BASELINE_SHAPES, LinearShape, ShapeError, parse_ints, parse_shapes,
                               shapes_from_config, shapes_from_config_file)

LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False}


def nk(shapes):
    return {s.name: (s.n, s.k) for s in shapes}


def test_llama3_8b_gives_the_baseline_shapes():
    got = nk(shapes_from_config(LLAMA3_8B))
    assert got == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                   "lm_head": (128256, 4096)}
    baseline = {tuple(map(int, s.split("x"))) for s in BASELINE_SHAPES}
    assert set(got.values()) <= baseline


def test_tensor_parallel_shards_columns_and_rows():
    got = nk(shapes_from_config(LLAMA3_8B, tp=2))
    # column-parallel: N / 2 (qkv: 16 q heads + 2 * 4 kv heads); row-parallel: K / 2
    assert got["qkv"] == ((16 + 2 * 4) * 128, 4096)
    assert got["gate_up"] == (14336, 4096)
    assert got["lm_head"] == (64128, 4096)
    assert got["o"] == (4096, 2048)
    assert got["down"] == (4096, 7168)


def test_fewer_kv_heads_than_ranks_replicates_one_kv_head_per_rank():
    got = nk(shapes_from_config(LLAMA3_8B, tp=16))
    assert got["qkv"] == ((2 + 2 * 1) * 128, 4096)
    with pytest.raises(ShapeError, match="multiple of num_key_value_heads"):
        shapes_from_config(dict(LLAMA3_8B, num_key_value_heads=3, num_attention_heads=24), tp=4)


def test_explicit_head_dim_and_mha_default_and_text_config():
    cfg = {"hidden_size": 2560, "intermediate_size": 9728, "num_attention_heads": 32, "head_dim": 128,
           "vocab_size": 151936}
    got = nk(shapes_from_config({"text_config": cfg}))
    assert got["qkv"] == (3 * 32 * 128, 2560)  # no num_key_value_heads: MHA
    assert got["o"] == (2560, 4096)  # head_dim * heads != hidden here
    # identical shapes are merged under one joined name
    sq = {"hidden_size": 1024, "intermediate_size": 1024, "num_attention_heads": 8, "vocab_size": 1000}
    names = {s.name for s in shapes_from_config(sq)}
    assert "o+down" in names


def test_indivisible_tp_and_missing_keys_are_errors():
    with pytest.raises(ShapeError, match="intermediate_size"):
        shapes_from_config(dict(LLAMA3_8B, intermediate_size=14335), tp=2)
    with pytest.raises(ShapeError, match="vocab_size"):
        shapes_from_config({k: v for k, v in LLAMA3_8B.items() if k != "vocab_size"})
    with pytest.raises(ShapeError):
        shapes_from_config(LLAMA3_8B, tp=0)


def test_config_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA3_8B))
    assert len(shapes_from_config_file(p)) == 5
    with pytest.raises(ShapeError, match="cannot read"):
        shapes_from_config_file(tmp_path / "missing.json")


def test_parse_shapes_and_ints():
    assert parse_shapes("4096x14336, qkv=6144x4096") == [LinearShape("", 4096, 14336), LinearShape("qkv", 6144, 4096)]
    assert len(parse_shapes("baseline")) == len(BASELINE_SHAPES)
    assert parse_shapes("4096x4096,4096X4096") == [LinearShape("", 4096, 4096)]
    for bad in ("4096", "4096x", "0x5", "axb"):
        with pytest.raises(ShapeError):
            parse_shapes(bad)
    assert parse_ints("1, 16,256") == [1, 16, 256]
    with pytest.raises(ShapeError):
        parse_ints("1,-2")
