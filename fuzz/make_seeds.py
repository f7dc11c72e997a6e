#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ (small valid and edge-case
inputs per fuzz target). Deterministic: rerun after changing it and commit
the result. Usage: python3 fuzz/make_seeds.py [corpus_dir]"""
import json
import os
import struct
import sys

CORPUS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- CRC32C (Castagnoli), as offload/crc32c.h ----
_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


# ---- safetensors ----
def safetensors(tensors, metadata=None, pad=0):
    """tensors: list of (name, dtype, shape, data bytes)."""
    header, offset, blob = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    js = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(js)) + js + blob


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("fuzz_safetensors_header", "two_f32", safetensors(
    [("a", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "F32", [2], f32(5, 6))], {"format": "pt"}))
put("fuzz_safetensors_header", "bf16_scalar_padded", safetensors(
    [("s", "BF16", [], b"\x80\x3f")], None, pad=6))
put("fuzz_safetensors_header", "empty_and_int", safetensors(
    [("z", "F16", [0, 3], b""), ("i", "I64", [1], struct.pack("<q", -1)), ("u", "U8", [3], b"abc")]))
put("fuzz_safetensors_header", "no_tensors", safetensors([], {"k": "v"}))
put("fuzz_safetensors_header", "gap", struct.pack("<Q", 60) +
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}     ' + b"\0" * 8)

# ---- model.safetensors.index.json (shards as fuzz/safetensors_fuzz.cc saves them) ----
s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
put("fuzz_hf_index", "valid", json.dumps({"metadata": {"total_size": 28},
                                          "weight_map": {"a": s1, "b": s2, "c": s2}}))
put("fuzz_hf_index", "wrong_shard", json.dumps({"weight_map": {"a": s2, "b": s2, "c": s2}}))
put("fuzz_hf_index", "save_id", json.dumps({"metadata": {"tierflow_save_id": "x"},
                                            "weight_map": {"a": s1, "b": s2, "c": s2}}))
put("fuzz_hf_index", "traversal", json.dumps({"weight_map": {"a": "../" + s1, "b": s2, "c": s2}}))
put("fuzz_hf_index", "dup_key", '{"weight_map": {"a": "%s", "a": "%s"}}' % (s1, s2))

# ---- config.json ----
put("fuzz_model_config", "gpt2", json.dumps({
    "model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
    "n_head": 12, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
    "tie_word_embeddings": True}))
put("fuzz_model_config", "llama", json.dumps({
    "model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "rope_scaling": None}))
put("fuzz_model_config", "llama3_gqa", json.dumps({
    "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "hidden_act": "silu", "tie_word_embeddings": True,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}))
put("fuzz_model_config", "qwen2", json.dumps({
    "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "hidden_act": "silu", "tie_word_embeddings": True, "sliding_window": 32768}))
put("fuzz_model_config", "mistral", json.dumps({
    "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "hidden_act": "silu", "sliding_window": 4096}))

# ---- training config (tierflow keys and DeepSpeed's) ----
put("fuzz_train_config", "deepspeed_zero_offload", json.dumps({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "bf16": {"enabled": True}, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                              "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                                                      "warmup_num_steps": 10, "total_num_steps": 100}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "contiguous_gradients": True, "overlap_comm": True}}))
put("fuzz_train_config", "deepspeed_nvme_fp16", json.dumps({
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 100,
             "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 50, "warmup_num_steps": 5,
                                                       "cos_min_ratio": 0.01}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/nvme",
                                                            "buffer_count": 4},
                          "sub_group_size": 1000000000},
    "aio": {"block_size": 1048576, "queue_depth": 8, "single_submit": False}}))
put("fuzz_train_config", "tierflow_keys", json.dumps({
    "tierflow": {"model": "tiny-gpt2", "seq_len": 64, "steps": 20, "eval_every": 5,
                 "shuffle": False, "seed": 3, "log_every": 1, "trace_steps": [2, 3]},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "linear"}}}))
put("fuzz_train_config", "contradiction", json.dumps({"bf16": {"enabled": True},
                                                       "fp16": {"enabled": True}}))

# ---- swap file header and block table (offload/swap_format.h) ----
def swap_header(run_id, dir_index, num_dirs, block_size, n_logical, n_physical, table_off,
                data_off, tensors, version=1):
    def s(x):
        x = x.encode()
        return struct.pack("<H", len(x)) + x
    table_copy = -(-(32 + 8 * n_logical) // 4096) * 4096
    p = s(run_id) + struct.pack("<IIIQQQQQI", dir_index, num_dirs, block_size, n_logical, n_physical,
                                table_off, table_copy, data_off, len(tensors))
    for name, dtype, nbytes, nblocks, start_dir, first in tensors:
        p += s(name) + struct.pack("<BQQIQ", dtype, nbytes, nblocks, start_dir, first)
    total = -(-(24 + len(p)) // 4096) * 4096
    pre = struct.pack("<QIII", 0x0100504157534654, version, total, len(p))
    crc = crc32c(p, crc32c(pre))
    out = pre + struct.pack("<I", crc) + p
    return out + b"\0" * (total - len(out))


put("fuzz_swap_header", "one_dir", swap_header("run-1", 0, 1, 4096, 3, 5, 4096, 4096 + 2 * 4096,
                                               [("w/exp_avg", 0, 8192, 2, 0, 0), ("b", 0, 100, 1, 0, 2)]))
put("fuzz_swap_header", "two_dirs", swap_header("r", 1, 2, 8192, 2, 2, 4096, 16384,
                                                [("x", 2, 30000, 4, 0, 0)]))
put("fuzz_swap_header", "newer_version", swap_header("r", 0, 1, 4096, 0, 0, 4096, 4096, [], version=2))
put("fuzz_swap_header", "empty", swap_header("", 0, 1, 4096, 0, 0, 4096, 4096, []))


def block_table(seq, physical, crcs):
    n = len(physical)
    body = struct.pack("<%dI" % n, *physical) + struct.pack("<%dI" % n, *crcs)
    pre = struct.pack("<QQQ", 0x4C4254424B4C4254, seq, n)
    crc = crc32c(body, crc32c(pre))
    out = pre + struct.pack("<II", crc, 0) + body
    size = -(-(32 + 8 * n) // 4096) * 4096
    return out + b"\0" * (size - len(out))


# First byte: the number of logical blocks the header promises.
put("fuzz_swap_block_table", "three", b"\x03" + block_table(7, [0, 2, 0xFFFFFFFF], [1, 2, 0]))
# (zero blocks: tests/fuzz_regressions/inputs/fuzz_swap_block_table/zero_blocks_null_memcpy)
put("fuzz_swap_block_table", "count_mismatch", b"\x02" + block_table(1, [4], [9]))

# ---- tokenizers ----
def byte_level_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = byte_level_alphabet()
vocab = {B2U[b]: b for b in range(256)}
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l")]
for l, r in merges:
    vocab[l + r] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
merges_txt = "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)
put("fuzz_vocab_merges", "small", json.dumps(vocab, ensure_ascii=False) + "\0" + merges_txt)
put("fuzz_vocab_merges", "no_merges", json.dumps(vocab, ensure_ascii=False) + "\0#version: 0.2\n")
put("fuzz_vocab_merges", "bad_merge", json.dumps(vocab, ensure_ascii=False) + "\0#version: 0.2\nx y\n")
small_vocab = {k: v for k, v in vocab.items() if v < 10}
put("fuzz_vocab_merges", "missing_bytes", json.dumps(small_vocab) + "\0")

tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                         "lstrip": False, "rstrip": False, "normalized": True, "special": True}],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                         "use_regex": True},
       "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                          "use_regex": True},
       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                 "vocab": vocab, "merges": ["%s %s" % m for m in merges]}}
put("fuzz_tokenizer_json", "gpt2_small", json.dumps(tok, ensure_ascii=False))
tok2 = json.loads(json.dumps(tok))
tok2["model"]["merges"] = [[l, r] for l, r in merges]  # newer tokenizers write pairs
put("fuzz_tokenizer_json", "merges_as_pairs", json.dumps(tok2, ensure_ascii=False))
tok3 = json.loads(json.dumps(tok))
tok3["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁"}
put("fuzz_tokenizer_json", "sentencepiece_style", json.dumps(tok3, ensure_ascii=False))

# ---- tokenizer components (fuzz/tokenizer_components_fuzz.cc): the
# component's JSON, a NUL byte, then the text it runs on. Besides real
# components, the issue #40 findings and variants, which must end quickly
# with a bound error. ----
def component(target, name, spec, text):
    put(target, name, json.dumps(spec, ensure_ascii=False).encode() + b"\0" + text.encode())


SAMPLE = "  Hello world, it's 2024!\n\n  h\u00e9llo <|eot_id|> \u4e2d\u6587\t x  "
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
component("fuzz_hf_normalizer", "llama2", {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}, SAMPLE)
component("fuzz_hf_normalizer", "nfkc_strip", {"type": "Sequence", "normalizers": [
    {"type": "NFKC"}, {"type": "Strip", "strip_left": True, "strip_right": True}]},
    "  \ufb01x \ufdfa ")
component("fuzz_hf_normalizer", "nfc", {"type": "NFC"}, "e\u0301 \u1100\u1161")
component("fuzz_hf_normalizer", "replace_regex", {"type": "Replace", "pattern": {"Regex": " {2,}"},
                                                 "content": " "}, SAMPLE)
component("fuzz_hf_normalizer", "replace_chain_doubles", {"type": "Sequence", "normalizers": [
    {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}] * 30}, "banana")
component("fuzz_hf_normalizer", "replace_regex_rescans", {"type": "Replace",
                                                         "pattern": {"Regex": "a*c|a"},
                                                         "content": "x"}, "a" * 3000)
component("fuzz_hf_pre_tokenizer", "llama3_split", {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    SAMPLE)
component("fuzz_hf_pre_tokenizer", "bytelevel", {"type": "ByteLevel", "add_prefix_space": True,
                                                 "use_regex": True}, SAMPLE)
component("fuzz_hf_pre_tokenizer", "metaspace_first", {"type": "Metaspace", "replacement": "\u2581",
                                                       "prepend_scheme": "first", "split": True},
          SAMPLE)
component("fuzz_hf_pre_tokenizer", "split_behaviors", {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": "-"}, "behavior": b, "invert": i}
    for b, i in [("MergedWithNext", False), ("Contiguous", True), ("Removed", False)]]},
    "ab--cd-e")
component("fuzz_hf_pre_tokenizer", "split_lookahead_quadratic", {
    "type": "Split", "pattern": {"Regex": "(?=a*c)a|."}, "behavior": "Isolated"}, "a" * 3000)
component("fuzz_hf_pre_tokenizer", "split_nested_repeat", {
    "type": "Split", "pattern": {"Regex": "(?:a|aa)*?c|."}, "behavior": "Isolated"}, "a" * 3000)
component("fuzz_hf_pre_tokenizer", "metaspace_long_replacement", {
    "type": "Metaspace", "replacement": "\u2581" * 1000}, "a b " * 100)
SPECIALS = [{"id": 1000 + i, "content": c, "special": True, "normalized": False}
            for i, c in enumerate(["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                                   "<|end_header_id|>", "<|eot|>"])]
component("fuzz_hf_added_tokens", "llama3_specials", SPECIALS,
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|eot")
component("fuzz_hf_added_tokens", "flags", [
    {"id": 1, "content": "<mask>", "special": True, "lstrip": True},
    {"id": 2, "content": "<sep>", "special": True, "rstrip": True},
    {"id": 3, "content": "cat", "single_word": True},
    {"id": 4, "content": "<tok>", "special": True},
    {"id": 5, "content": "<tok>>", "special": True}], "a  <mask> a <sep>  cat cats <tok>> <tok>")
component("fuzz_hf_added_tokens", "shared_prefixes", [
    {"id": 10 + i, "content": "<extra_%d>" % i, "special": True} for i in range(200)],
    "<extra_1><extra_19><extra_199><extra_2000><extra_<<<")
component("fuzz_hf_added_tokens", "lstrip_space_run", [
    {"id": 1, "content": " ", "lstrip": True}], " " * 2000)

# ---- text to encode ----
put("fuzz_gpt2_encode", "english", "Hello world, it's the 2nd  time\n\n  they've said <|endoftext|> ok")
put("fuzz_gpt2_encode", "unicode", "Grüße 東京 ١٢٣ 😀 \u00a0\u2003x")
put("fuzz_gpt2_encode", "invalid_utf8", b"ok \xc3\x28 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end\xe2\x82")
put("fuzz_gpt2_encode", "spaces", " \t\r\n  \n \u3000'S'LL'd  ")

# ---- token files (llm.c and raw) ----
def llmc(magic, version, ids, fmt, count=None):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, len(ids) if count is None else count
    return struct.pack("<256i", *h) + struct.pack("<%d%s" % (len(ids), fmt), *ids)


put("fuzz_token_file", "llmc_gpt2", llmc(20240520, 1, [50256, 15496, 995, 0], "H"))
put("fuzz_token_file", "llmc_llama3", llmc(20240801, 7, [128000, 9906, 1917], "I"))
put("fuzz_token_file", "llmc_count_mismatch", llmc(20240520, 1, [1, 2, 3], "H", count=5))
put("fuzz_token_file", "raw_u16", struct.pack("<6H", 1, 2, 3, 50256, 7, 8))
put("fuzz_token_file", "raw_odd", b"\x01\x00\x02")

# ---- data loader state (matches the loader fuzz/data_fuzz.cc builds) ----
state = {"format": "tierflow.data_loader", "version": 1, "epoch": 3, "index": 5, "shuffle": True,
         "seed": 7, "batch": 2, "seq_len": 4, "num_tokens": 200, "num_train_tokens": 180}
put("fuzz_data_loader_state", "valid", json.dumps(state))
put("fuzz_data_loader_state", "noshuffle_last", json.dumps(dict(state, shuffle=False, index=21)))
put("fuzz_data_loader_state", "negative", json.dumps(dict(state, epoch=-1, index=-1)))
put("fuzz_data_loader_state", "typed_wrong", json.dumps(dict(state, seed=-7, version="1")))

# ---- trainer_state.json (a checkpoint dir holding model/config.json = "{}") ----
ckpt = {"format": "tierflow.checkpoint", "version": 1, "step": 1, "optimizer_step": 1,
        "files": [{"path": "model/config.json", "bytes": 2, "crc32c": crc32c(b"{}")}],
        "units": [{"name": "layer.0", "num_params": 10}]}
put("fuzz_checkpoint_state", "valid", json.dumps(ckpt))
put("fuzz_checkpoint_state", "wrong_crc", json.dumps(dict(ckpt, files=[{"path": "model/config.json",
                                                                       "bytes": 2, "crc32c": 1}])))
put("fuzz_checkpoint_state", "missing_file", json.dumps(dict(ckpt, files=[{"path": "optimizer/u.safetensors",
                                                                          "bytes": 8, "crc32c": 0}])))
put("fuzz_checkpoint_state", "no_files", json.dumps({"format": "tierflow.checkpoint", "version": 1}))
# A first byte 0x01 has the entry point seal the rest (a correct "crc32c"),
# so mutations reach the field validation behind the checksum.
full = dict(ckpt, loss_scaler={"scale": 65536.0, "good_steps": 3, "hysteresis_left": 2},
            data={"format": "tierflow.data_loader", "version": 1, "epoch": 0, "index": 4},
            loss=2.5, model="tiny-llama", world_size=1, sequences_per_step=4)
put("fuzz_checkpoint_state", "sealed_valid", b"\x01" + json.dumps(full).encode())
put("fuzz_checkpoint_state", "sealed_out_of_range",
    b"\x01" + json.dumps(dict(full, step=-5, optimizer_step=2**62,
                               data=dict(full["data"], epoch=2**40))).encode())

# ---- fuzz_tier_checkpoint: trainer_state.json of a checkpoint beside
# optimizer/u.safetensors (TIER_UNIT, as fuzz/tier_fuzz.cc writes it), a copy
# outside the checkpoint and optimizer/link.safetensors pointing at the copy ----
TIER_UNIT = safetensors([("master", "F32", [2], f32(1, 2)), ("exp_avg", "F32", [2], f32(0.5, 0.25)),
                         ("exp_avg_sq", "F32", [2], f32(4, 8))], pad=2)
TIER_ESCAPE = "../../../../outside/u"  # from optimizer/: the copy outside


def tier_file(path, data):
    return {"path": path, "bytes": len(data), "crc32c": crc32c(data)}


def tier_state(units=None, files=None, **extra):
    doc = {"format": "tierflow.checkpoint", "version": 1, "step": 1, "optimizer_step": 1,
           "loss_scaler": {"scale": 1.0, "good_steps": 0, "hysteresis_left": 0}, "loss": 2.5,
           "model": "tiny", "data": {"epoch": 0},
           "units": [{"name": "u", "num_params": 2}] if units is None else units,
           "files": [tier_file("model/config.json", b"{}"), tier_file("optimizer/u.safetensors", TIER_UNIT)]
           if files is None else files}
    doc.update(extra)
    return json.dumps(doc)


TIER_SEEDS = {
    "valid": tier_state(),
    "unit_name_escapes": tier_state(units=[{"name": TIER_ESCAPE, "num_params": 2}]),
    "unit_name_absolute": tier_state(units=[{"name": "/etc/passwd", "num_params": 2}]),
    "files_path_escapes": tier_state(files=[tier_file("../../../outside/u.safetensors", TIER_UNIT)]),
    "unit_file_is_symlink": tier_state(units=[{"name": "link", "num_params": 2}],
                                       files=[tier_file("optimizer/link.safetensors", TIER_UNIT)]),
    "num_params_absurd": tier_state(units=[{"name": "u", "num_params": 1 << 62}]),
    "num_params_max": tier_state(units=[{"name": "u", "num_params": 2 ** 64 - 1}]),
    "num_params_is_string": tier_state(units=[{"name": "u", "num_params": "2"}]),
    "num_params_negative": tier_state(units=[{"name": "u", "num_params": -1}]),
    "name_is_number": tier_state(units=[{"name": 7, "num_params": 2}]),
    "duplicate_unit": tier_state(units=[{"name": "u", "num_params": 2}, {"name": "u", "num_params": 2}]),
    "optimizer_layout_is_number": tier_state(optimizer_layout=7),
    "step_is_string": tier_state(step="1"),
    "file_bytes_is_string": tier_state(files=[dict(tier_file("model/config.json", b"{}"), bytes="2")]),
    "run_id_is_number": tier_state(optimizer_layout="nvme",
                                   swap_set={"run_id": 7, "directories": ["/nonexistent-tierflow"]}),
    "run_id_escapes": tier_state(optimizer_layout="nvme",
                                 swap_set={"run_id": "../x", "directories": ["/nonexistent-tierflow"]}),
    "swap_dir_relative": tier_state(optimizer_layout="nvme",
                                    swap_set={"run_id": "r", "directories": ["relative/dir"]}),
    "swap_dir_dotdot": tier_state(optimizer_layout="nvme",
                                  swap_set={"run_id": "r", "directories": ["/tmp/../etc"]}),
    "loss_scaler_is_array": tier_state(loss_scaler=[1, 2]),
    "deeply_nested_data": tier_state(data=json.loads("[" * 100 + "]" * 100)),
}
for name, text in TIER_SEEDS.items():
    put("fuzz_tier_checkpoint", name, text)

# ---- fuzz_instruction_jsonl: bytes 0-3 = format (0 prompt-completion,
# 1 alpaca, 2 chat), template (0 the tokenizer's, 1 llama3, 2 chatml,
# 3 llama2, 4 mistral), flags (1 drop long, 2 packing), seq_len - 1; then
# the JSONL.
CHAT = json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}]})
INSTRUCTION_SEEDS = {
    "chat_llama3": bytes([2, 1, 0, 40]) + (CHAT + "\n" + CHAT + "\n").encode(),
    "chat_packed_mistral": bytes([2, 4, 2, 63]) + (CHAT + "\n\n" + CHAT + "\n").encode(),
    "pc_plain_drop": bytes([0, 0, 1, 8])
    + (json.dumps({"prompt": "Q?", "completion": "A long answer here"}) + "\n").encode(),
    "alpaca_chatml": bytes([1, 2, 2, 30])
    + (json.dumps({"instruction": "Add", "input": "2 3", "output": "5"}) + "\n").encode(),
    "chat_llama2_bad_order": bytes([2, 3, 0, 50])
    + (json.dumps({"messages": [{"role": "assistant", "content": "x"},
                                {"role": "user", "content": "y"}]}) + "\n").encode(),
}
for name, data in INSTRUCTION_SEEDS.items():
    put("fuzz_instruction_jsonl", name, data)
