// For tests: two small hand-written tokenizer.json files in the shapes real
// Llama folders carry (ids are listed beside each test that uses them).
#pragma once

namespace dslaunch::runtime {

// Llama 3's shape: Split with Llama 3's regex + ByteLevel(use_regex false),
// merges as pairs, special added tokens <|bos|> 18 and <|eot|> 19, a
// non-special added token <x> 20, a bos template, the ByteLevel decoder.
//   0 H  1 e  2 l  3 o  4 Ġ  5 w  6 r  7 d  8 !  9 He  10 ll  11 llo
//   12 Hello  13 Ġw  14 or  15 Ġwor  16 Ġworl  17 Ġworld  21 <  22 |  23 >  24 t
inline constexpr char kTinyByteLevelJson[] = R"json({
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    {"id": 18, "content": "<|bos|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 19, "content": "<|eot|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 20, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [], "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [18], "tokens": ["<|bos|>"]}}}]},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
    "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "w": 5, "r": 6, "d": 7, "!": 8, "He": 9, "ll": 10, "llo": 11,
              "Hello": 12, "\u0120w": 13, "or": 14, "\u0120wor": 15, "\u0120worl": 16, "\u0120world": 17,
              "<": 21, "|": 22, ">": 23, "t": 24},
    "merges": [["H", "e"], ["l", "l"], ["ll", "o"], ["He", "llo"], ["\u0120", "w"], ["o", "r"], ["\u0120w", "or"],
               ["\u0120wor", "l"], ["\u0120worl", "d"]]}
})json";

// Llama 2's shape: byte_fallback BPE, normalizer Prepend("▁") + Replace(" ", "▁"),
// merges as "a b" strings, <unk>/<s>/</s> added, the Llama 2 decoder sequence.
//   0 <unk>  1 <s>  2 </s>  3 <0x0A>  4 <0xC3>  5 <0xA9>  6 ▁  7 a  8 b  9 ▁a  10 ab  11 ▁ab
inline constexpr char kTinyLlama2Json[] = R"json({
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                     {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5, "▁": 6, "a": 7, "b": 8,
              "▁a": 9, "ab": 10, "▁ab": 11},
    "merges": ["▁ a", "a b", "▁a b"]}
})json";

}  // namespace dslaunch::runtime
