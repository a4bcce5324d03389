// trainfit serve's page and the HTML reports in a real browser: Debian's chromium, headless, driven
// by puppeteer-core (no browser is downloaded). Run by ctest (label `browser`) with TRAINFIT_CLI and
// TRAINFIT_SOURCE_DIR set; SCREENSHOT_DIR, when set, receives a PNG of the page and of each report
// (docs/ keeps them: tests/browser/README.md).
//
// Checks: the page shows the peak memory and verdict `trainfit plan --format json` gives for the
// default setup, for twenty seeded random setups set through its controls, for a shared link and
// for a pasted config.json; every curve point is drawn at the height its value has on the axis's
// ticks; the time bar's critical path adds up to the step time and its total says it; a setup that
// runs out of memory shows no speed; the legends say words, not JSON keys; the controls come in
// groups and hide what does not apply; with scripts off the page and a report still show the
// summary; at phone width nothing runs off the screen; the boundary box is `plan --largest`'s; a
// dropped OOM snapshot shows what `trace --snapshot` reads; the advisor lists commands; each report
// opens from a file with its charts; no page logs a console error.
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
const GiB = 1073741824;
const gib = (bytes) => (bytes / GiB).toFixed(2) + " GiB";
// A time as the text output and the page write it (seconds_text in src/report/report_text.cpp).
const seconds = (s) => (s >= 10 ? s.toFixed(1) + " s" : s >= 0.1 ? s.toFixed(3) + " s" : (s * 1e3).toFixed(1) + " ms");

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
  assert.equal(got.peak, gib(expected.memory.peak_allocated_bytes), `${what}: peak allocated`);
  assert.equal(got.verdict, expected.verdict, `${what}: verdict`);
}
// Waits until the page shows what `trainfit plan` prints for these arguments, then compares. A
// render can follow a change and still be an earlier request's answer arriving late, so the wait is
// for the figures themselves, not for the next render; on a timeout the comparison says what shows.
async function showsPlan(page, args, what) {
  const expected = plan(args);
  const want = expected.error ? null : gib(expected.memory.peak_allocated_bytes);
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
  const charts = await page.evaluate(() => ({svg: document.querySelectorAll("#result svg").length,
                                             time: !!document.getElementById("time-bar"), none: !!document.getElementById("time-none")}));
  // The seed's 7B LoRA does not fit a 16 GB card without checkpointing: no step, so no time bar.
  assert.ok(charts.svg >= 3 && charts.none && !charts.time, `memory bar and two curves drawn, no time bar (${JSON.stringify(charts)})`);
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

// Each drawn point of the two curves against the axis it is drawn on: its height read back through
// the tick labels (their numbers and their grid lines' heights, linear or logarithmic as the chart
// says) must be its value, and its value the API's. No point may be clipped at the top.
async function curvePointsOnScale(page, what) {
  const drawn = await page.evaluate(() => ["curve-seq", "curve-batch"].map((id) => {
    const s = document.querySelector(`#${id} svg`);
    return {id, scale: s.dataset.yScale,
            ticks: [...s.querySelectorAll("text.y-tick")].map((t, i) => ({label: t.textContent,
                                                                          y: Number(s.querySelectorAll("line.grid")[i].getAttribute("y1"))})),
            points: [...s.querySelectorAll("circle.point")].map((c) => ({value: Number(c.dataset.value), y: Number(c.getAttribute("cy"))})),
            clipped: s.querySelectorAll(".off-scale").length};
  }));
  const api = await page.evaluate(async () => (await fetch("/api/curves" + location.search)).json());
  for (const chart of drawn) {
    const ticks = chart.ticks.map((t) => {
      const m = t.label.match(/^([\d.]+) GiB$/);
      assert.ok(m, `${what} ${chart.id}: tick label ${t.label} is a number of GiB`);
      if (chart.scale === "log")
        assert.match(m[1], /^[125]0*$|^0\.0*[125]$/, `${what} ${chart.id}: a logarithmic axis's tick is 1, 2 or 5 times a power of ten`);
      else
        assert.match(m[1], /^\d+$|^\d*\.\d$/, `${what} ${chart.id}: a linear axis's tick is round`);
      return {value: Number(m[1]) * GiB, y: t.y};
    });
    assert.ok(ticks.length >= 2, `${what} ${chart.id}: at least two ticks`);
    assert.equal(chart.clipped, 0, `${what} ${chart.id}: no point off the scale`);
    const f = chart.scale === "log" ? Math.log10 : (v) => v;
    const [a, b] = [ticks[0], ticks[ticks.length - 1]];
    const setting = chart.id === "curve-seq" ? "seq" : "batch";
    const values = api[setting].points.map((p) => p.peak_allocated_bytes);
    assert.deepEqual(chart.points.map((p) => p.value), values, `${what} ${chart.id}: the points are the API's curve`);
    for (const p of chart.points) {
      const expected = a.y + (b.y - a.y) * (f(p.value) - f(a.value)) / (f(b.value) - f(a.value));
      assert.ok(Math.abs(p.y - expected) < 0.6, `${what} ${chart.id}: ${gib(p.value)} drawn at y ${p.y}, its value is at ${expected.toFixed(1)}`);
      assert.ok(p.value <= b.value * (1 + 1e-9) && p.value >= a.value * (1 - 1e-9), `${what} ${chart.id}: ${gib(p.value)} inside the axis`);
    }
  }
}

await check("every curve point is drawn at its value, on round ticks, however far it runs over the card", async () => {
  // A 7B full fine-tune on a 24 GB card: the curves run from about 60 GiB to over 400 GiB.
  const args = ["--model", "qwen2.5-7b", "--gpu", "rtx-4090", "--method", "full", "--seq", "2048", "--batch", "1"];
  await setControls(page, {model: "qwen2.5-7b", gpu: "rtx-4090", method: "full", seq: "2048", batch: "1", grad_ckpt: "", attn: ""});
  await showsPlan(page, args, "qwen2.5-7b full on rtx-4090");
  await curvePointsOnScale(page, "7B full on a 4090");
  const scales = await page.$$eval("#result svg[data-y-scale]", (s) => s.map((x) => x.dataset.yScale));
  assert.ok(scales.includes("log"), `a range this wide is drawn on a logarithmic axis (${scales})`);
  await setControls(page, {model: "qwen2.5-0.5b", gpu: "h200", method: "lora", seq: "512"});
  await showsPlan(page, ["--model", "qwen2.5-0.5b", "--gpu", "h200", "--method", "lora", "--seq", "512", "--batch", "1"], "0.5B LoRA on h200");
  await curvePointsOnScale(page, "0.5B LoRA on an H200");
});

await check("the time bar is the critical path: it adds up to the step time, and its total says so", async () => {
  for (const [setup, args] of [
    [{model: "qwen2.5-0.5b", gpu: "h200", method: "lora", seq: "512", batch: "1"},  // host-bound
     ["--model", "qwen2.5-0.5b", "--gpu", "h200", "--method", "lora", "--seq", "512", "--batch", "1"]],
    [{model: "qwen2.5-7b", gpu: "h200", method: "lora", seq: "4096", batch: "1"},  // GPU-bound micro-batch, host-bound update
     ["--model", "qwen2.5-7b", "--gpu", "h200", "--method", "lora", "--seq", "4096", "--batch", "1"]]]) {
    await setControls(page, setup);
    const expected = await showsPlan(page, args, args.join(" "));
    const bar = await page.evaluate(() => {
      const s = document.getElementById("time-bar");
      const critical = [...s.querySelectorAll("rect.critical")];
      return {total: document.getElementById("time-total").textContent,
              sum: critical.reduce((a, r) => a + Number(r.dataset.seconds), 0),
              end: Math.max(...critical.map((r) => Number(r.getAttribute("x")) + Number(r.getAttribute("width")))),
              mark: Number(document.getElementById("time-total-mark").getAttribute("x1")),
              overlapped: s.querySelectorAll("rect.overlapped").length,
              legend: [...document.querySelectorAll("#result .legend span")].map((e) => e.textContent)};
    });
    const step = expected.time.step_seconds;
    assert.equal(bar.total, "step " + seconds(step), `${args.join(" ")}: the bar's total`);
    assert.ok(Math.abs(bar.sum - step) < 1e-9 * step, `${args.join(" ")}: the critical path adds up to ${step} s (${bar.sum})`);
    assert.ok(Math.abs(bar.end - bar.mark) < 1, `${args.join(" ")}: the path ends at the step's mark (${bar.end} vs ${bar.mark})`);
    assert.ok(bar.overlapped > 0, `${args.join(" ")}: the overlapped work is shown under the path`);
    for (const item of bar.legend) assert.ok(!/_/.test(item), `a legend says words, not a JSON key: ${item}`);
  }
});

await check("a setup that runs out of memory shows no step time and no speed", async () => {
  const args = ["--model", "qwen2.5-14b", "--gpu", "rtx-4090", "--method", "full", "--seq", "2048", "--batch", "1"];
  await setControls(page, {model: "qwen2.5-14b", gpu: "rtx-4090", method: "full", seq: "2048", batch: "1"});
  const expected = await showsPlan(page, args, "14B full on a 4090");
  assert.equal(expected.verdict, "oom");
  const got = await page.evaluate(() => ({step: document.getElementById("step-time").textContent,
                                          tps: document.getElementById("tokens-per-second").textContent,
                                          none: !!document.getElementById("time-none"), bar: !!document.getElementById("time-bar"),
                                          words: document.getElementById("verdict-words").textContent}));
  assert.deepEqual([got.step, got.tps, got.none, got.bar], ["does not run", "-", true, false]);
  assert.equal(got.words, expected.summary);
  assert.ok(!/tokens\/s/.test(got.words), "the words give no speed");
});

await check("the controls come in groups, and a setting that does not apply is hidden", async () => {
  const groups = await page.$$eval("#setting-controls fieldset legend", (l) => l.map((x) => x.textContent));
  for (const g of ["model and card", "method", "precision", "step", "objective", "layout"])
    assert.ok(groups.includes(g), `a group ${g} (${groups})`);
  await setControls(page, {method: "full"});
  const hidden = await page.evaluate(() => ["rank", "double_quant", "model", "seq"].map((k) =>
    document.querySelector(`.control[data-key="${k}"]`).hidden));
  assert.deepEqual(hidden, [true, true, false, false], "rank and double_quant hidden under full fine-tuning; model and seq shown");
  await setControls(page, {method: "qlora"});
  const shownNow = await page.evaluate(() => ["rank", "double_quant"].map((k) => document.querySelector(`.control[data-key="${k}"]`).hidden));
  assert.deepEqual(shownNow, [false, false], "rank and double_quant shown under QLoRA");
});

await check("with scripts off, a shared link still shows its setup's summary (drawn by the server)", async () => {
  const args = ["--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--method", "lora", "--seq", "1024"];
  const expected = plan(args);
  const quiet = await browser.newPage();
  await quiet.setJavaScriptEnabled(false);
  await quiet.goto(url + "?model=qwen2.5-1.5b&gpu=h100-sxm&method=lora&seq=1024&batch=", {waitUntil: "load"});
  const got = await quiet.evaluate(() => ({peak: document.getElementById("peak-allocated")?.textContent ?? null,
                                           verdict: document.getElementById("verdict")?.textContent ?? null,
                                           words: document.getElementById("verdict-words")?.textContent ?? null,
                                           step: document.getElementById("step-time")?.textContent ?? null,
                                           form: !!document.querySelector("noscript") }));
  assert.equal(got.peak, gib(expected.memory.peak_allocated_bytes));
  assert.equal(got.verdict, expected.verdict);
  assert.equal(got.words, expected.summary);
  assert.equal(got.step, seconds(expected.time.step_seconds));
  const plain = await quiet.goto(url, {waitUntil: "load"}).then(() => quiet.evaluate(() => document.getElementById("verdict")?.textContent));
  assert.equal(plain, plan(["--model", "qwen2.5-7b", "--gpu", "rtx-5070-ti"]).verdict, "the page's starting setup, without scripts");
  await quiet.close();
});

await check("at a phone's width (375 px) nothing runs off the screen", async () => {
  const phone = await browser.newPage();
  await phone.setViewport({width: 375, height: 800, isMobile: true});
  phone.on("pageerror", (e) => consoleErrors.push(`phone: ${e.message}`));
  await phone.goto(url, {waitUntil: "load"});
  await phone.waitForFunction(() => Number(document.body.dataset.renders || 0) > 0, {timeout: 15000});
  const widths = await phone.evaluate(() => ({page: document.documentElement.scrollWidth,
                                              widest: Math.max(...[...document.querySelectorAll("svg, .figure, .controls")]
                                                                  .map((e) => e.getBoundingClientRect().right))}));
  assert.ok(widths.page <= 376 && widths.widest <= 376, `the page is ${widths.page} px wide, its widest part ends at ${widths.widest} px`);
  if (shots) await phone.screenshot({path: path.join(shots, "serve-page-phone.png"), fullPage: true});
  await phone.close();
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

await check("a pasted recipe is planned as `trainfit plan --recipe FILE`, and its keys are listed", async () => {
  for (const name of ["trl-sft-qlora-7b.yaml", "llama-factory-qwen3-8b-lora-sft.yaml"]) {
    const file = path.join(source, "recipes", name);
    await setControls(page, {gpu: "rtx-4090"});
    const before = await page.evaluate(() => Number(document.body.dataset.recipes || 0));
    await page.evaluate((text) => {
      document.getElementById("recipe-paste").open = true;
      document.getElementById("recipe").value = text;
    }, readFileSync(file, "utf8"));
    await page.click("#recipe-button");
    await page.waitForFunction((n) => Number(document.body.dataset.recipes || 0) > n, {timeout: 15000}, before);
    await showsPlan(page, ["--recipe", file, "--gpu", "rtx-4090"], `recipe ${name}`);
    const report = await page.evaluate(() => document.getElementById("recipe-report").textContent);
    assert.match(report, /recipe keys that change neither memory nor time, ignored: dataset_name|ignored: trust_remote_code/,
                 `${name}: the ignored keys are listed`);
  }
  const before = await page.evaluate(() => Number(document.body.dataset.recipes || 0));
  await page.evaluate(() => { document.getElementById("recipe").value = "model_name_or_path: qwen2.5-0.5b\ncompletion_only_loss: true\n"; });
  await page.click("#recipe-button");
  await page.waitForFunction((n) => Number(document.body.dataset.recipes || 0) > n, {timeout: 15000}, before);
  const refused = await page.evaluate(() => document.getElementById("recipe-report").textContent);
  assert.match(refused, /completion_only_loss: a completion-only loss is not planned yet/);
  // Back to the setup the checks below start from: every control cleared, then theirs.
  await page.evaluate(() => {
    for (const input of document.querySelectorAll("[id^=setting-]")) {
      input.value = "";
      input.dispatchEvent(new Event("input", {bubbles: true}));
    }
  });
  await setControls(page, {model: "qwen2.5-1.5b", gpu: "h100-sxm", method: "lora", seq: "8192", batch: "1"});
  await showsPlan(page, ["--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--method", "lora", "--seq", "8192", "--batch", "1"],
                  "the controls after the recipe");
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
    if (kind === "plan" || kind === "plans") {  // the summary reads without scripts
      const quiet = await browser.newPage();
      await quiet.setJavaScriptEnabled(false);
      await quiet.goto("file://" + file, {waitUntil: "load"});
      const got = await quiet.evaluate(() => ({peak: document.getElementById("peak-allocated")?.textContent ?? null,
                                               rows: document.querySelectorAll("#report table tbody tr").length}));
      if (kind === "plan")
        assert.equal(got.peak, gib(plan(["--model", "qwen2.5-14b", "--gpu", "rtx-5070-ti", "--method", "qlora"]).memory.peak_allocated_bytes));
      else
        assert.equal(got.rows, JSON.parse(execFileSync(cli, ["plan", "--format", "json"], {encoding: "utf8"})).plans.length);
      await quiet.close();
    }
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
