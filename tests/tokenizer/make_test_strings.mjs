// The strings the tokenizers are compared on, one JSON string per line
// (newlines and tabs inside a string survive): hand-picked cases for each
// class of input, then seeded random mixes of them. Deterministic: the same
// file on every run.
//
// Usage: node make_test_strings.mjs > strings.jsonl
const handPicked = [
  "", " ", "  ", "\t", "\n", "\r\n", " \n", "\n\n\n", "a", "I", "Hello world", "Hello, world!", " Hello", "Hello ",
  "Hello   world", "trailing spaces   ", "   leading spaces", "tabs\tinside\t\twords", "\ttab first", "line\nbreak",
  "two\n\nbreaks", "windows\r\nline", "mixed \t \n whitespace \n\t ", "word\u00a0nbsp", "ideographic\u3000space",
  "This is a test sentence.", "grabbed", " grabbed", "           grabbed",
  // contractions, the case-insensitive group of Llama 3's pattern
  "I'm", "you're", "they've", "she'll", "he'd", "it's", "don't", "DON'T", "I'M", "YOU'RE", "We'Ll", "rock'n'roll",
  "'s'", "''", "'", "O'Neil's", "can't've",
  // digits: Llama 3 splits runs into groups of at most 3
  "1", "12", "123", "1234", "12345", "123456789", "3.14159", "1,000,000", "2024-01-15", "v1.2.3", "0x1F", "9999999999",
  "٣٤٥", "१२३", "①②③", "Ⅻ", "½", "a1b2c3", "100%", "$42.99", "1e-5",
  // Latin with accents, other scripts
  "café", "naïve résumé", "Ångström", "Ça va? Très bien!", "Straße", "ﬁnancial ligature", "Zürich Ærø øl",
  "Ελληνικά γράμματα", "Привет, мир!", "Ёжик в тумане", "日本語のテキスト", "中文分词测试", "한국어 문장입니다",
  "ひらがなカタカナ", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "हिन्दी में लिखा गया वाक्य", "தமிழ் எழுத்து", "ภาษาไทย",
  "ქართული", "Հայերեն", "አማርኛ", "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "e\u0301 combining", "Ꙋ",
  // emoji, with ZWJ sequences, skin tones, flags, keycaps
  "🦙", "🦙Ꙋ", "Ꙋ🦙", "I ❤️ llamas 🦙🦙", "👨‍👩‍👧‍👦 family", "👩🏽‍💻 coder", "🏳️‍🌈", "🇫🇷🇯🇵", "1️⃣ keycap", "😀😃😄😁",
  "emoji👍between", "☃ ★ ♫", "🤔?", "\u200b zero width \u200d joiner",
  // code
  "def f(x):\n    return x ** 2\n", "int main() { return 0; }", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "console.log(`${a} + ${b}`);", "<div class=\"x\">&amp;</div>", "SELECT * FROM t WHERE id = 42;",
  "#include <vector>", "x = {'a': 1, \"b\": [2, 3]}", "path/to/file.txt", "https://example.com/a?b=c&d=e",
  "user@example.com", "    indented four", "\t\tindented tabs", "a  =  b", "!!!???...", "---", "***", "====",
  "(parenthesized)", "[brackets]", "{braces}", "<angle>", "\"quoted\"", "'single'", "back\\slash", "~tilde~",
  // special tokens in text
  "<|begin_of_text|>Hello", "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
  "text <|eot_id|> text", "<|eot_id|><|eot_id|>", "<|reserved_special_token_17|>", "<|not_a_token|>", "<|eot_id",
  "<s>", "</s>", "<unk>", "<s>Hello</s>", "a<s>b", " <s> ", "<<s>>",
  // long
  "The llama (/ˈlɑːmə/; 🦙Spanish pronunciation: [ˈʎama]) (Lama glama) is a domesticated South American camelid, " +
      "widely used as a meat and pack animal by Andean cultures since the Pre-Columbian era.",
  "a".repeat(300), "ab".repeat(200), " ".repeat(50), "\n".repeat(20), "1".repeat(40), "🦙".repeat(30),
  "supercalifragilisticexpialidocious antidisestablishmentarianism",
];

const pools = [
  ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Tokenizer", "HELLO", "World", "a", "I"],
  ["café", "naïve", "über", "Ærø", "façade", "piñata", "Łódź", "şehir"],
  ["日本", "中文", "한국어", "テスト", "漢字", "詞"],
  ["مرحبا", "שלום", "नमस्ते", "हिन्दी", "Привет", "Ελλάδα", "ไทย"],
  ["🦙", "👍", "👨‍👩‍👧", "🏳️‍🌈", "🇯🇵", "❤️", "😂", "🤖"],
  [" ", "  ", "   ", "\t", "\n", "\n\n", " \n ", "\r\n", "\t\t"],
  ["0", "7", "42", "123", "2024", "31415926", "1,000", "3.5"],
  ["'s", "'t", "'re", "'ll", "'D", "n't"],
  [".", ",", "!", "?", ";", ":", "-", "--", "(", ")", "\"", "'", "...", "/", "&", "#", "@", "%", "_", "=", "+", "*"],
  ["<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|begin_of_text|>", "<s>", "</s>"],
];

// A small seeded generator (mulberry32), so the strings never change.
let seed = 20240915;
function random() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];

const strings = [...handPicked];
for (let i = 0; i < 1500; ++i) {
  const parts = [];
  const length = 1 + Math.floor(random() * 12);
  for (let j = 0; j < length; ++j) parts.push(pick(pick(pools)));
  strings.push(parts.join(random() < 0.5 ? " " : ""));
}
for (const s of strings) process.stdout.write(JSON.stringify(s) + "\n");
