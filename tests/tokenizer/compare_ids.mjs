// Compares two files of id lines (one line per string of STRINGS) and
// prints the agreement; exits 1 on any difference, showing the first few.
// Usage: node compare_ids.mjs LABEL EXPECTED ACTUAL STRINGS
import fs from "node:fs";

const [label, expectedFile, actualFile, stringsFile] = process.argv.slice(2);
const lines = (file) => fs.readFileSync(file, "utf8").replace(/\n$/, "").split("\n");
const strings = lines(stringsFile).map((l) => JSON.parse(l));
const expected = lines(expectedFile);
const actual = lines(actualFile);
if (expected.length !== strings.length || actual.length !== strings.length) {
  console.log(`FAIL: ${label}: ${strings.length} strings but ${expected.length} expected and ${actual.length} actual lines`);
  process.exit(1);
}
const differ = [];
strings.forEach((s, i) => { if (expected[i] !== actual[i]) differ.push(i); });
if (differ.length === 0) {
  console.log(`PASS: ${label}: ${strings.length} strings, all identical`);
  process.exit(0);
}
console.log(`FAIL: ${label}: ${differ.length} of ${strings.length} strings differ`);
for (const i of differ.slice(0, 5)) {
  console.log(`  ${JSON.stringify(strings[i]).slice(0, 100)}\n    expected: ${expected[i].slice(0, 160)}\n    actual:   ${actual[i].slice(0, 160)}`);
}
process.exit(1);
