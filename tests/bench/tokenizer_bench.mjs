// Node side of tokenizer_bench: times @huggingface/tokenizers' encode over the corpus
// repeated to at least MB megabytes, after one untimed warm-up pass, and prints one JSON
// line {"bytes": ..., "tokens": ..., "seconds": ..., "cpu_seconds": ...} (wall time and the
// process's user+system CPU time). Usage:
//   node tokenizer_bench.mjs NODE_MODULES_DIR TOKENIZER_DIR CORPUS_JSONL MB
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, tokenizerDir, corpusPath, mb] = process.argv.slice(2);
const entry = path.join(nodeModules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const readJson = (name) => JSON.parse(fs.readFileSync(path.join(tokenizerDir, name), "utf8"));
const tokenizer = new Tokenizer(readJson("tokenizer.json"), readJson("tokenizer_config.json"));
const texts = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
const encoder = new TextEncoder();
const corpusBytes = texts.reduce((n, t) => n + encoder.encode(t).length, 0);
const repeats = Math.max(1, Math.ceil((Number(mb) * 1e6) / corpusBytes));

for (const t of texts) tokenizer.encode(t);  // warm-up
let tokens = 0;
const start = process.hrtime.bigint();
const cpuStart = process.cpuUsage();
for (let r = 0; r < repeats; ++r) {
  for (const t of texts) tokens += tokenizer.encode(t).ids.length;
}
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
const cpu = process.cpuUsage(cpuStart);
const cpuSeconds = (cpu.user + cpu.system) / 1e6;
console.log(JSON.stringify({ bytes: corpusBytes * repeats, tokens, seconds, cpu_seconds: cpuSeconds }));
