// Turns the vocabularies and merges shipped by the npm packages
// llama3-tokenizer-js (Llama 3) and llama-tokenizer-js (Llama 2) into the
// tokenizer files a Hugging Face model folder carries:
//
//   OUT/llama3/            tokenizer.json (Split regex + ByteLevel, merges as
//                          [["a","b"]] pairs, 256 special tokens,
//                          TemplateProcessing bos), tokenizer_config.json
//   OUT/llama3_gpt2/       the same vocabulary behind GPT-2's form: ByteLevel
//                          pre-tokenizer with its own regex, merges as "a b"
//   OUT/llama2/            tokenizer.json as Llama-2 folders carry it (BPE with
//                          byte_fallback, normalizer Prepend + Replace, decoder
//                          Replace/ByteFallback/Fuse/Strip), tokenizer_config.json,
//                          and tokenizer.model (SentencePiece BPE, protobuf
//                          written by hand below)
//   OUT/llama2_metaspace/  the newer Llama-2 form: Metaspace pre-tokenizer
//                          (prepend_scheme "first") instead of the normalizer
//
// Usage: node make_reference_folders.mjs OUT
import fs from "node:fs";
import path from "node:path";
import llama3 from "llama3-tokenizer-js";
import llama2 from "llama-tokenizer-js";

const out = process.argv[2];
if (!out) throw new Error("usage: make_reference_folders.mjs OUT");

function write(folder, name, content) {
  fs.mkdirSync(path.join(out, folder), { recursive: true });
  fs.writeFileSync(path.join(out, folder, name), content);
}

function addedToken(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

function bosTemplate(bos, bosId) {
  const special = { SpecialToken: { id: bos, type_id: 0 } };
  return {
    type: "TemplateProcessing",
    single: [special, { Sequence: { id: "A", type_id: 0 } }],
    pair: [special, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: bos, type_id: 1 } },
           { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { [bos]: { id: bos, ids: [bosId], tokens: [bos] } },
  };
}

// Merges in rank order: the packages keep them in a Map from "a b" to rank,
// inserted in rank order.
function mergePairs(tokenizer) {
  const pairs = [];
  for (const key of tokenizer.merges.keys()) {
    const space = key.indexOf(" ");
    pairs.push([key.slice(0, space), key.slice(space + 1)]);
  }
  return pairs;
}

// ---- Llama 3 ----
// The package builds its tokenizer when imported (its default export).
const kLlama3BaseVocab = 128000;
const vocab3 = {};
for (let id = 0; id < kLlama3BaseVocab; ++id) vocab3[llama3.vocabById[id]] = id;
const added3 = [];
for (let id = kLlama3BaseVocab; id < llama3.vocabById.length; ++id) added3.push(addedToken(id, llama3.vocabById[id]));
const merges3 = mergePairs(llama3);
const llama3Regex =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const byteLevel = (extra) => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true, ...extra });

function llama3Json(preTokenizer, merges) {
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added3,
    normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: { type: "Sequence", processors: [
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      bosTemplate("<|begin_of_text|>", 128000)] },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab: vocab3, merges },
  };
}
const llama3Config = JSON.stringify({
  bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>", clean_up_tokenization_spaces: true,
  model_input_names: ["input_ids", "attention_mask"], model_max_length: 131072, tokenizer_class: "PreTrainedTokenizerFast",
}, null, 2);
write("llama3", "tokenizer.json", JSON.stringify(llama3Json({ type: "Sequence", pretokenizers: [
  { type: "Split", pattern: { Regex: llama3Regex }, behavior: "Isolated", invert: false },
  byteLevel({ use_regex: false })] }, merges3)));
write("llama3", "tokenizer_config.json", llama3Config);
write("llama3_gpt2", "tokenizer.json", JSON.stringify(llama3Json(byteLevel({}), merges3.map((p) => p.join(" ")))));
write("llama3_gpt2", "tokenizer_config.json", llama3Config);

// ---- Llama 2 ----
const vocab2 = {};
llama2.vocabById.forEach((piece, id) => { vocab2[piece] = id; });
const merges2 = mergePairs(llama2).map((p) => p.join(" "));
const added2 = [addedToken(0, "<unk>"), addedToken(1, "<s>"), addedToken(2, "</s>")];
function llama2Json(normalizer, preTokenizer, decoder) {
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: added2, normalizer, pre_tokenizer: preTokenizer,
    post_processor: bosTemplate("<s>", 1), decoder,
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: true, byte_fallback: true, vocab: vocab2, merges: merges2 },
  };
}
const llama2Config = JSON.stringify({
  add_bos_token: true, add_eos_token: false, bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>",
  clean_up_tokenization_spaces: false, legacy: true, model_max_length: 4096, pad_token: null,
  sp_model_kwargs: {}, tokenizer_class: "LlamaTokenizer",
}, null, 2);
write("llama2", "tokenizer.json", JSON.stringify(llama2Json(
  { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "▁" }, { type: "Replace", pattern: { String: " " }, content: "▁" }] },
  null,
  { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" },
                                 { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] }), null, 2));
write("llama2", "tokenizer_config.json", llama2Config);
write("llama2_metaspace", "tokenizer.json", JSON.stringify(llama2Json(
  null,
  { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
  { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" },
                                 { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] })));
write("llama2_metaspace", "tokenizer_config.json", llama2Config);

// ---- Llama 2's tokenizer.model: a SentencePiece ModelProto ----
// Field numbers from sentencepiece_model.proto: ModelProto {pieces 1,
// trainer_spec 2, normalizer_spec 3}; SentencePiece {piece 1, score 2 (float),
// type 3}; TrainerSpec {model_type 3 (BPE = 2), vocab_size 4, byte_fallback 35,
// unk_id 40, bos_id 41, eos_id 42, pad_id 43}; NormalizerSpec {name 1,
// add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5}.
// A piece's score is minus the rank of the first merge that makes it, so
// SentencePiece's "merge the pair whose piece scores highest" follows the
// merges' order, as the Hugging Face conversion of Llama 2 does.
function varint(value) {
  const bytes = [];
  let v = BigInt.asUintN(64, BigInt(value));
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    bytes.push(b);
  } while (v);
  return Buffer.from(bytes);
}
const tag = (field, wire) => varint((field << 3) | wire);
const intField = (field, value) => Buffer.concat([tag(field, 0), varint(value)]);
const bytesField = (field, bytes) => Buffer.concat([tag(field, 2), varint(bytes.length), bytes]);
const stringField = (field, s) => bytesField(field, Buffer.from(s, "utf8"));
function floatField(field, value) {
  const b = Buffer.alloc(4);
  b.writeFloatLE(value);
  return Buffer.concat([tag(field, 5), b]);
}

const kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;
const firstRank = new Map();
merges2.forEach((m, rank) => {
  const merged = m.replace(" ", "");
  if (!firstRank.has(merged)) firstRank.set(merged, rank);
});
const pieces = llama2.vocabById.map((piece, id) => {
  let type = kNormal, score = 0;
  if (id === 0) type = kUnknown;
  else if (id <= 2) type = kControl;
  else if (/^<0x[0-9A-F]{2}>$/.test(piece)) type = kByte;
  else score = firstRank.has(piece) ? -firstRank.get(piece) : -1e9;
  return bytesField(1, Buffer.concat([stringField(1, piece), floatField(2, score), intField(3, type)]));
});
const trainerSpec = Buffer.concat([intField(3, 2), intField(4, pieces.length), intField(35, 1), intField(40, 0),
                                   intField(41, 1), intField(42, 2), intField(43, -1)]);
const normalizerSpec = Buffer.concat([stringField(1, "identity"), intField(3, 1), intField(4, 0), intField(5, 1)]);
write("llama2", "tokenizer.model", Buffer.concat([...pieces, bytesField(2, trainerSpec), bytesField(3, normalizerSpec)]));
