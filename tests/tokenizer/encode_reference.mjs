// Encodes every string of STRINGS (one JSON string per line) with one of the
// npm reference encoders and prints one line of space-separated ids per
// string, without bos or eos:
//   llama3js FOLDER   llama3-tokenizer-js (its own encoder and data)
//   llama2js FOLDER   llama-tokenizer-js (its own encoder and data)
//   hfjs FOLDER       @huggingface/tokenizers on FOLDER/tokenizer.json
// Usage: node encode_reference.mjs ENCODER FOLDER STRINGS
import fs from "node:fs";
import path from "node:path";
import llama3 from "llama3-tokenizer-js";
import llama2 from "llama-tokenizer-js";
import { Tokenizer } from "@huggingface/tokenizers";

const [encoderName, folder, stringsFile] = process.argv.slice(2);
const strings = fs.readFileSync(stringsFile, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

let encode;
if (encoderName === "llama3js") {
  encode = (s) => llama3.encode(s, { bos: false, eos: false });
} else if (encoderName === "llama2js") {
  // add_preceding_space: SentencePiece's dummy prefix, as Llama 2 has it.
  encode = (s) => llama2.encode(s, /*add_bos_token=*/false, /*add_preceding_space=*/true);
} else if (encoderName === "hfjs") {
  const json = JSON.parse(fs.readFileSync(path.join(folder, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(folder, "tokenizer_config.json"), "utf8"));
  const tokenizer = new Tokenizer(json, config);
  encode = (s) => tokenizer.encode(s, { add_special_tokens: false }).ids;
} else {
  throw new Error(`unknown encoder ${encoderName}`);
}
const lines = strings.map((s) => encode(s).join(" "));
process.stdout.write(lines.join("\n") + "\n");
