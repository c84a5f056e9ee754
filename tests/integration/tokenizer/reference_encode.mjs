// Reference side of the tokenizer parity test: encodes every string of a corpus (one JSON
// string per line) with @huggingface/tokenizers and writes one JSON object per line:
// {"ids": [...], "decoded": "...", "decoded_skip": "...", "nfc": "..."} (decode with default
// options and with skip_special_tokens; the input in Unicode NFC). Usage:
//   node reference_encode.mjs NODE_MODULES_DIR TOKENIZER_DIR CORPUS_JSONL OUT_JSONL
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, tokenizerDir, corpusPath, outPath] = process.argv.slice(2);
const entry = path.join(nodeModules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const readJson = (name) => JSON.parse(fs.readFileSync(path.join(tokenizerDir, name), "utf8"));
const tokenizer = new Tokenizer(readJson("tokenizer.json"), readJson("tokenizer_config.json"));

const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const text = JSON.parse(line);
  const ids = tokenizer.encode(text).ids;
  // decode() refuses an empty list; the empty string decodes to "".
  const decoded = ids.length ? tokenizer.decode(ids) : "";
  const decodedSkip = ids.length ? tokenizer.decode(ids, { skip_special_tokens: true }) : "";
  out.push(JSON.stringify({ ids, decoded, decoded_skip: decodedSkip, nfc: text.normalize("NFC") }));
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
