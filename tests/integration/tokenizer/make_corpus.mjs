// Writes corpus.jsonl, the fixed text corpus of the tokenizer parity test: one JSON string
// per line, from a seeded generator (mulberry32, seed 20260530), so running it again gives
// the same file. Usage: node make_corpus.mjs > corpus.jsonl
let state = 20260530;
function rand() {  // mulberry32
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (a) => a[int(0, a.length - 1)];
const many = (n, f) => Array.from({ length: n }, f);
const range = (lo, hi) => String.fromCodePoint(int(lo, hi));

const words = ("the of and to in is was that for it with as his on be at by I this had not are " +
  "but from or have an they which one you were her all she there would their we him been has " +
  "when who will more no if out so said what up its about into than them can only other new " +
  "some could time these two may then do first any my now such like our over man me even most " +
  "made after also did many before must through back years where much your way well down " +
  "should because each just those people Mr how too little state good very make world still " +
  "own see men work long get here between both life being under never day same another know " +
  "while last might us great old year off come since against go came right used take three " +
  "tokenizer gradient reward rollout Transformer GRPO policy advantage Kubernetes Prometheus").split(" ");
const punct = [".", ",", "!", "?", ";", ":", "...", " -", "—", "'", "\"", "(", ")"];

function sentence() {
  const n = int(3, 18);
  let s = many(n, () => pick(words)).join(" ");
  s = s[0].toUpperCase() + s.slice(1);
  if (rand() < 0.3) s += pick(punct) + " " + pick(words);
  return s + pick([".", ".", ".", "!", "?", "...", ""]);
}
function prose() { return many(int(1, 6), sentence).join(pick([" ", " ", "  ", "\n", "\n\n"])); }

const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE",
  "'M", "'LL", "'D", "'Ll", "'rE", "n't", "N'T", "'", "''", "'x", "'ſ", "’s", "’LL"];
function contraction() {
  const base = pick(["I", "HE", "she", "They", "WE", "you", "it", "John", "DON", "can", "X", ""]);
  return many(int(1, 4), () => base + pick(contractions) + pick([" ", "", " go", "!", "\n"])).join("");
}

const code = [
  "def f(x):\n    return x * 2\n",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
  "const y = await fetch(`https://example.com/${id}`);\n",
  "#include <vector>\nint main() { std::vector<int> v{1,2,3}; return v.size(); }\n",
  "    if x == None:\n        raise ValueError(\"bad\")\n",
  "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
  "x = [i**2 for i in range(10) if i % 3 == 0]  # squares",
  "fn main() {\n    println!(\"{}\", 1_000_000u64);\n}",
  "<div class=\"a\"><span>&nbsp;</span></div>",
  "$ ls -la /tmp && echo $HOME | tr a-z A-Z",
  "\t\tindented_with_tabs();\r\n\r\n",
  "lambda_ = lambda *args, **kw: (args, kw)",
  "{\"key\": [1, 2.5e-3, null, true], \"nested\": {\"a\": \"b\"}}",
  "  \n  \n\t\n",
  "if(a&&b||!c){x^=y<<2;}",
];
function codeSnippet() {
  let s = many(int(1, 4), () => pick(code)).join(pick(["", "\n", "\n\n"]));
  if (rand() < 0.3) s = s.replaceAll("    ", "\t");
  return s;
}

function cjk() {
  const blocks = [[0x4e00, 0x9fa5], [0x3041, 0x3096], [0x30a1, 0x30fa], [0xac00, 0xd7a3]];
  return many(int(1, 40), () => {
    const r = rand();
    if (r < 0.1) return pick(["。", "，", "、", "「", "」", "！", "？", " ", "：", "\n"]);
    if (r < 0.15) return pick(words) + " ";
    if (r < 0.2) return String(int(0, 2030));
    const [lo, hi] = pick(blocks);
    return range(lo, hi);
  }).join("");
}
const cjkPhrases = ["你好，世界！", "我们今天学习强化学习。", "東京は日本の首都です。",
  "ひらがなとカタカナ", "안녕하세요, 세계!", "机器学习模型的训练需要大量数据", "Qwen3是一个大语言模型"];

const emoji = ["😀", "👍", "👍🏽", "❤️", "🇺🇸", "🇯🇵", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍💻", "👩‍❤️‍💋‍👨",
  "🤖", "🔥", "✨", "1️⃣", "#️⃣", "🫠", "🐈‍⬛", "🏴‍☠️", "😂😂😂", "☕", "👋🏻", "🇩🇪🇫🇷"];
function emojiText() {
  return many(int(1, 12), () => rand() < 0.6 ? pick(emoji) : pick(words) + pick(["", " "])).join(pick(["", " "]));
}

function digits() {
  const r = rand();
  if (r < 0.3) return many(int(1, 120), () => String(int(0, 9))).join("");
  if (r < 0.5) return `${int(0, 99999)}.${int(0, 99999)} + ${int(1, 9)}e${int(-30, 30)}`;
  if (r < 0.7) return `$${int(1, 999)},${String(int(0, 999)).padStart(3, "0")},${String(int(0, 999)).padStart(3, "0")}.${int(10, 99)}`;
  if (r < 0.85) return `Call 555-${int(1000, 9999)} or +1 (${int(200, 999)}) ${int(100, 999)}-${int(1000, 9999)} before 2026-11-${String(int(1, 30)).padStart(2, "0")}`;
  return "#### " + String(int(0, 1e9));
}

const spaces = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0",
  "\u3000", "\u2028", "\u2029", "\u0085", "\u200b", "\ufeff", "\u180e", "\u2003", "\u202f",
  "\u205f", "\u1680", "\u000b", "\u000c", "\u001c"];
function whitespace() {
  return many(int(1, 10), () => rand() < 0.5 ? pick(spaces).repeat(int(1, 8)) : pick(words)).join("");
}

const scripts = ["Привет, мир", "Γειά σου Κόσμε", "مرحبا بالعالم", "नमस्ते दुनिया",
  "שלום עולם", "สวัสดีชาวโลก", "Xin chào thế giới", "Zażółć gęślą jaźń", "Ærøskøbing",
  "Straße", "İstanbul'da", "ǅemal", "ﬁnance", "Ⅻ", "①②③", "½ + ¾", "x² + y³", "αβγ123",
  "हिन्दी में लिखा गया पाठ", "العربية لغة جميلة", "Ελληνικά και English mixed",
  "Српски језик", "ქართული", "Հայերեն", "ᚠᛇᚻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "ｆｕｌｌｗｉｄｔｈ"];
function mixed() {
  return many(int(1, 6), () => rand() < 0.7 ? pick(scripts) : pick(words)).join(pick([" ", "", ", ", "\n"]));
}

// Decomposed and differently ordered combining sequences: NFC changes these.
const combining = ["e\u0301", "E\u0301", "a\u030a", "A\u030A", "n\u0303", "o\u0308", "u\u0308",
  "a\u0323\u0302", "a\u0302\u0323", "s\u0323\u0307", "\u1112\u1161\u11ab", "\u1100\u1161",
  "\u212b", "\u2126", "\u0041\u030A\u0301", "\u0915\u093c", "\u0627\u0653", "\u3099",
  "\u304b\u3099", "i\u0307", "x\u0301\u0302\u0303", "\u0301", "e\u0301\u0301", "Å", "é"];
function combiningText() {
  return many(int(1, 10), () => rand() < 0.6 ? pick(combining) : pick(words) + pick(["", " "])).join("");
}

const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
  "<tool_call>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
  "<|end_header_id|>", "<|reserved_special_token_5|>", "<|im_start", "im_end|>", "<|",
  "|>", "<|fim_prefix|>", "<|vision_pad|>", "<|endoftext|><|endoftext|>"];
function specialText() {
  return many(int(1, 8), () => {
    const r = rand();
    if (r < 0.4) return pick(specials);
    if (r < 0.5) return pick(["\n", " ", "user\n", "assistant\n"]);
    return pick(words) + pick(["", " "]);
  }).join("");
}

function randomAscii() { return many(int(1, 60), () => String.fromCharCode(int(0, 127))).join(""); }
function longText() { return many(int(20, 60), prose).join("\n\n"); }

const fixed = ["", " ", "  ", "\n", "\t", "a", "A", "'", "'s", "'S", "'LL", "I'LL", "HE'S",
  "don't", "DON'T", "0", "00", "000", "1234567890", "a".repeat(1000), " ".repeat(2000),
  "\n".repeat(300), "ab".repeat(700), "9".repeat(500), "😀".repeat(100), "\u0301".repeat(20),
  "Hello world!", "Hello  world !", " leading space", "trailing space ", "tab\tseparated\tvalues",
  "\r\n\r\n", "a\u0000b", "\u007f", "ſ", "'ſ", "K", "\u212a", "ﬀ"];

const generators = [[prose, 400], [contraction, 120], [codeSnippet, 220], [cjk, 220],
  [() => pick(cjkPhrases), 30], [emojiText, 180], [digits, 180], [whitespace, 180],
  [mixed, 180], [combiningText, 160], [specialText, 160], [randomAscii, 60], [longText, 10]];
const lines = [...fixed];
for (const [gen, count] of generators) for (let i = 0; i < count; ++i) lines.push(gen());
for (const line of lines) process.stdout.write(JSON.stringify(line) + "\n");
