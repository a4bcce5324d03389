// trainfit serve's page and the HTML reports in a real browser: Debian's chromium, headless, driven
// by puppeteer-core (no browser is downloaded). Run by ctest (label `browser`) with TRAINFIT_CLI and
// TRAINFIT_SOURCE_DIR set; SCREENSHOT_DIR, when set, receives a PNG of the page and of each report
// (docs/ keeps them: tests/browser/README.md).
//
// Checks: the page shows the peak memory and verdict `trainfit plan --format json` gives for the
// default setup, for twenty seeded random setups set through its controls, for a shared link and
// for a pasted config.json; the boundary box is `plan --largest`'s; a dropped OOM snapshot shows
// what `trace --snapshot` reads; the advisor lists commands; each report opens from a file with its
// charts; no page logs a console error.
import {spawn, execFileSync, spawnSync} from "node:child_process";
import {mkdtempSync, writeFileSync, copyFileSync, readFileSync, mkdirSync} from "node:fs";
import {tmpdir} from "node:os";
import path from "node:path";
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

const cli = process.env.TRAINFIT_CLI;
const source = process.env.TRAINFIT_SOURCE_DIR;
const shots = process.env.SCREENSHOT_DIR || "";
assert.ok(cli && source, "set TRAINFIT_CLI and TRAINFIT_SOURCE_DIR");
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
const MiB = 1048576;

function plan(args) {
  const r = spawnSync(cli, ["plan", ...args, "--format", "json"], {encoding: "utf8"});
  return r.status === 0 ? JSON.parse(r.stdout) : {error: r.stderr.trim(), code: r.status};
}

// A seeded generator (mulberry32), so that a failure names a setup that can be run again.
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let failures = 0;
async function check(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n     ${e.stack || e}`);
  }
}

// The server on a free port; its first line says where.
const server = spawn(cli, ["serve", "--port", "0"], {stdio: ["ignore", "pipe", "inherit"]});
const url = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/http:\/\/\S+\//);
    if (m) resolve(m[0]);
  });
  server.on("exit", (code) => reject(new Error(`trainfit serve exited with ${code}`)));
  setTimeout(() => reject(new Error("trainfit serve did not start in 20 s")), 20000);
});

const browser = await puppeteer.launch({executablePath: chromium, headless: true,
                                        args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]});
const consoleErrors = [];
async function open(address) {
  const page = await browser.newPage();
  await page.setViewport({width: 1280, height: 1000});
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(`${address}: ${m.text()}`); });
  page.on("pageerror", (e) => consoleErrors.push(`${address}: ${e.message}`));
  await page.goto(address, {waitUntil: "load"});
  return page;
}
const renders = (page) => page.evaluate(() => Number(document.body.dataset.renders || 0));
async function settled(page, before) {
  await page.waitForFunction((n) => Number(document.body.dataset.renders || 0) > n, {timeout: 15000}, before);
}
const shown = (page) => page.evaluate(() => ({
  peak: document.getElementById("peak-allocated")?.textContent ?? null,
  verdict: document.getElementById("verdict")?.textContent ?? null,
  error: document.getElementById("error").textContent,
}));
function expectSame(got, expected, what) {
  if (expected.error) {
    assert.ok(got.error.length > 0, `${what}: the CLI refuses (${expected.error}) but the page shows no error`);
    return;
  }
  assert.equal(got.error, "", `${what}: the page shows an error`);
  assert.equal(got.peak, (expected.memory.peak_allocated_bytes / MiB).toFixed(1) + " MiB", `${what}: peak allocated`);
  assert.equal(got.verdict, expected.verdict, `${what}: verdict`);
}
// Waits until the page shows what `trainfit plan` prints for these arguments, then compares. A
// render can follow a change and still be an earlier request's answer arriving late, so the wait is
// for the figures themselves, not for the next render; on a timeout the comparison says what shows.
async function showsPlan(page, args, what) {
  const expected = plan(args);
  const want = expected.error ? null : (expected.memory.peak_allocated_bytes / MiB).toFixed(1) + " MiB";
  try {
    await page.waitForFunction((w) => (w === null ? document.getElementById("error").textContent.length > 0
                                                  : document.getElementById("peak-allocated")?.textContent === w),
                               {timeout: 15000}, want);
  } catch {
    // expectSame reports the difference
  }
  expectSame(await shown(page), expected, what);
  return expected;
}
// Sets controls as a user does (a value, then an input event), all at once; "" clears one.
async function setControls(page, values) {
  await page.evaluate((v) => {
    for (const [key, value] of Object.entries(v)) {
      const input = document.getElementById("setting-" + key);
      input.value = value;
      input.dispatchEvent(new Event("input", {bubbles: true}));
    }
  }, values);
}

const page = await open(url);
await page.waitForFunction(() => Number(document.body.dataset.renders || 0) > 0, {timeout: 15000});

await check("the page opens on the seed's question, as `trainfit plan` answers it", async () => {
  expectSame(await shown(page), plan(["--model", "qwen2.5-7b", "--gpu", "rtx-5070-ti"]), "qwen2.5-7b on rtx-5070-ti");
  const controls = await page.evaluate(() => [...document.querySelectorAll(".control[data-key]")].map((e) => e.dataset.key));
  const schema = JSON.parse(execFileSync(cli, ["schema"], {encoding: "utf8"}));
  assert.deepEqual(controls.sort(), schema["x-order"].filter((k) => k !== "gpu_spec").sort(),
                   "a control for every setting of the schema but the file one");
  const charts = await page.evaluate(() => document.querySelectorAll("#result svg").length);
  assert.ok(charts >= 4, `memory bar, two curves and the time bar drawn (${charts} svg)`);
});
if (shots) await page.screenshot({path: path.join(shots, "serve-page.png"), fullPage: true});

await check("twenty random setups: the page shows the peak and verdict of `trainfit plan --format json`", async () => {
  const next = random(14);
  const pick = (list) => list[Math.floor(next() * list.length)];
  const models = JSON.parse(execFileSync(cli, ["models", "--format", "json"], {encoding: "utf8"}))
                   .map((m) => m.name).filter((n) => !/(70b|72b|65b|8x22b|235b|405b)/.test(n));
  const gpus = JSON.parse(execFileSync(cli, ["gpus", "--format", "json"], {encoding: "utf8"})).map((g) => g.id);
  let refused = 0;
  for (let i = 0; i < 20; i++) {
    const setup = {model: pick(models), gpu: pick(gpus), method: pick(["full", "lora", "qlora"]),
                   seq: String(pick([256, 512, 1024, 2048, 4096, 8192])), batch: String(pick([1, 2, 4, 8])),
                   grad_ckpt: pick(["on", "off"]), attn: pick(["sdpa", "eager", "flash"])};
    const args = ["--model", setup.model, "--gpu", setup.gpu, "--method", setup.method, "--seq", setup.seq,
                  "--batch", setup.batch, setup.grad_ckpt === "on" ? "--grad-ckpt" : "--no-grad-ckpt", "--attn", setup.attn];
    await setControls(page, setup);
    const expected = await showsPlan(page, args, `setup ${i + 1}: trainfit plan ${args.join(" ")}`);
    if (expected.error) refused++;
  }
  assert.ok(refused <= 5, `${refused} of the 20 setups are refused: the draw should give mostly valid setups`);
});

await check("the share link reopens the same setup", async () => {
  const link = await page.$eval("#share-link", (a) => a.href);
  const expected = await shown(page);
  const again = await open(link);
  await again.waitForFunction(() => Number(document.body.dataset.renders || 0) > 0, {timeout: 15000});
  assert.deepEqual(await shown(again), expected);
  await again.close();
});

await check("moving one control recomputes (seq up: memory up)", async () => {
  const at = (seq) => ["--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--method", "lora", "--seq", seq, "--batch", "1"];
  await setControls(page, {model: "qwen2.5-1.5b", gpu: "h100-sxm", method: "lora", seq: "1024", batch: "1", grad_ckpt: "",
                           attn: ""});
  await showsPlan(page, at("1024"), "seq 1024");
  const small = await shown(page);
  await setControls(page, {seq: "8192"});
  await showsPlan(page, at("8192"), "seq 8192");
  const large = await shown(page);
  assert.ok(parseFloat(large.peak) > parseFloat(small.peak), `${large.peak} at 8192 > ${small.peak} at 1024`);
});

await check("a pasted config.json is planned as `trainfit plan --model FILE`", async () => {
  const file = path.join(source, "data/models/qwen2.5-0.5b.json");
  const before = await renders(page);
  await page.evaluate((text) => {
    const area = document.getElementById("config-json");
    area.value = text;
    area.dispatchEvent(new Event("input", {bubbles: true}));
  }, readFileSync(file, "utf8"));
  await settled(page, before);
  await showsPlan(page, ["--model", file, "--gpu", "h100-sxm", "--method", "lora", "--seq", "8192", "--batch", "1"],
                  "pasted qwen2.5-0.5b");
  await page.evaluate(() => {
    const area = document.getElementById("config-json");
    area.value = "";
    area.dispatchEvent(new Event("input", {bubbles: true}));
  });
  await showsPlan(page, ["--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--method", "lora", "--seq", "8192", "--batch", "1"],
                  "the pasted config cleared");
});

await check("the advisor lists setups that fit, as commands", async () => {
  const before = await page.evaluate(() => Number(document.body.dataset.advised || 0));
  await page.click("#advise-button");
  await page.waitForFunction((n) => Number(document.body.dataset.advised || 0) > n, {timeout: 30000}, before);
  const commands = await page.$$eval("#advice .command", (e) => e.map((x) => x.textContent));
  assert.ok(commands.length > 0, "no command listed");
  for (const c of commands) assert.match(c, /^trainfit plan --model qwen2\.5-1\.5b/);
  const args = commands[0].split(" ").slice(2);
  const p = plan(args);
  assert.ok(p.verdict === "fits", `the first advised command fits: ${commands[0]} -> ${p.verdict || p.error}`);
});
if (shots) await page.screenshot({path: path.join(shots, "serve-page-advice.png"), fullPage: true});

await check("the boundary box shows `trainfit plan --largest batch` and `--largest seq`", async () => {
  const args = ["--model", "llama3.1-8b", "--gpu", "a100-40gb", "--method", "lora", "--grad-ckpt"];
  await setControls(page, {model: "llama3.1-8b", gpu: "a100-40gb", method: "lora", grad_ckpt: "on", seq: "", batch: ""});
  await showsPlan(page, args, "llama3.1-8b LoRA on a100-40gb");
  for (const setting of ["batch", "seq"]) {
    const b = plan([...args, "--largest", setting]).boundary;
    assert.ok(b && b.command, `plan --largest ${setting} names a command`);
    await page.waitForFunction((id, c) => document.getElementById(id)?.textContent === c, {timeout: 15000},
                               "boundary-" + setting, b.command);
    const row = await page.$$eval(".boundary tr", (rows, i) => [...rows[i].cells].map((c) => c.textContent),
                                  setting === "batch" ? 1 : 2);
    assert.equal(row[2], String(b.largest_at_all), `${setting}: the boundary shown`);
    assert.equal(row[4], b.largest_fits === b.searched_up_to ? `${b.largest_fits} (the most it takes)` : String(b.largest_fits),
                 `${setting}: what advise keeps`);
  }
});

await check("a dropped OOM snapshot (.pickle.gz) shows the failed request, as `trainfit trace --snapshot` reads it", async () => {
  const file = path.join(source, "data/bench/h200-boundary-2026-12-05/snapshots/q3b-full-ckpt-80g-batch13.pickle.gz");
  const r = spawnSync(cli, ["trace", "--snapshot", file, "--format", "json"], {encoding: "utf8", maxBuffer: 64 << 20});
  assert.equal(r.status, 0, r.stderr);
  const oom = JSON.parse(r.stdout).snapshot.oom;
  const before = await page.evaluate(() => Number(document.body.dataset.snapshots || 0));
  const input = await page.$("#snapshot-file");
  await input.uploadFile(file);
  await page.waitForFunction((n) => Number(document.body.dataset.snapshots || 0) > n, {timeout: 30000}, before);
  const got = await page.evaluate(() => ({request: document.getElementById("oom-request")?.textContent,
                                          largest: document.getElementById("oom-largest-block")?.textContent,
                                          why: document.getElementById("oom-why")?.textContent,
                                          error: document.querySelector("#snapshot-report .error")?.textContent}));
  assert.equal(got.error, undefined, `no error: ${got.error}`);
  assert.equal(got.request, (oom.requested_bytes / MiB).toFixed(1) + " MiB");
  assert.equal(got.largest, (oom.largest_free_block_bytes / MiB).toFixed(1) + " MiB");
  assert.match(got.why, oom.fragmentation ? /^Fragmentation/ : /^Not fragmentation/);
  const beside = await page.$$eval("#snapshot-report table", (t) => t.length);
  assert.ok(beside >= 1, "the plan's figures beside it");
});
if (shots) await page.screenshot({path: path.join(shots, "serve-page-snapshot.png"), fullPage: true});

await check("bad input at the page: an unknown model is a message, not a crash", async () => {
  const bad = await open(url + "?model=qwen9-1t&gpu=h100-sxm");
  await bad.waitForFunction(() => Number(document.body.dataset.renders || 0) > 0, {timeout: 15000});
  const s = await shown(bad);
  assert.match(s.error, /unknown model/);
  await bad.close();
  // The page's fetch of a failing plan shows in the console as a failed resource (HTTP 400): expected.
  for (let i = consoleErrors.length - 1; i >= 0; i--) if (/status of 400/.test(consoleErrors[i])) consoleErrors.splice(i, 1);
});

// ---- the HTML reports, each opened from a file -------------------------------------------------
const work = mkdtempSync(path.join(tmpdir(), "trainfit-reports-"));
function report(name, args) {
  const file = path.join(work, name + ".html");
  const r = spawnSync(cli, args, {encoding: "utf8", maxBuffer: 64 << 20});
  assert.equal(r.status, 0, `trainfit ${args.join(" ")}: ${r.stderr}`);
  writeFileSync(file, r.stdout);
  return file;
}
const benchDir = path.join(work, "bench");
mkdirSync(benchDir);
copyFileSync(path.join(source, "data/bench/h200-seed-16gb-2026-11-30.jsonl"), path.join(benchDir, "results.jsonl"));
const reports = {
  plan: report("plan", ["plan", "--model", "qwen2.5-14b", "--gpu", "rtx-5070-ti", "--method", "qlora", "--format", "html"]),
  plans: report("plans", ["plan", "--format", "html"]),
  advise: report("advise", ["advise", "--model", "llama3.1-8b", "--gpu", "a100-40gb", "--seq", "2048", "--format", "html"]),
  bench: report("bench", ["bench", path.join(source, "plans/seed-16gb.toml"), "--results", benchDir, "--judge-only",
                          "--format", "html"]),
  validate: report("validate", ["validate", path.join(source, "data/reference/h200-hf-peft-calibration.jsonl"), "--format", "html"]),
  watch: report("watch", ["watch", "--replay", path.join(source, "data/watch/h200_capacity_bound.jsonl"), "--format", "html"]),
  trace: report("trace", ["trace", path.join(source, "data/trace/loader/trace.json.gz"), "--snapshot",
                          path.join(source, "data/trace/snapshot/peak.pickle.json"), "--format", "html"]),
};
for (const [kind, file] of Object.entries(reports)) {
  await check(`the ${kind} report opens from a file with its charts`, async () => {
    const p = await open("file://" + file);
    const drawn = await p.evaluate(() => ({svg: document.querySelectorAll("#report svg").length,
                                           marks: document.querySelectorAll("#report svg path, #report svg rect, #report svg circle").length,
                                           text: document.getElementById("report").textContent.length}));
    assert.ok(drawn.svg >= 1 && drawn.marks >= 3, `${kind}: charts drawn (${JSON.stringify(drawn)})`);
    assert.ok(drawn.text > 100, `${kind}: text shown`);
    if (kind === "plan") {
      const expected = plan(["--model", "qwen2.5-14b", "--gpu", "rtx-5070-ti", "--method", "qlora"]);
      const got = await p.evaluate(() => ({peak: document.getElementById("peak-allocated").textContent,
                                           verdict: document.getElementById("verdict").textContent, error: ""}));
      expectSame(got, expected, "plan report");
    }
    if (shots) await p.screenshot({path: path.join(shots, `report-${kind}.png`), fullPage: true});
    await p.close();
  });
}

await check("no page logged a console error", async () => {
  assert.deepEqual(consoleErrors, []);
});

await browser.close();
server.kill("SIGTERM");
const code = await new Promise((resolve) => server.on("exit", (c) => resolve(c)));
await check("trainfit serve stops on SIGTERM with exit code 0", async () => assert.equal(code, 0));
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
