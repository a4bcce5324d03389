// The page of `trainfit serve`: controls generated from the setup's schema (/api/schema), each change
// recomputed through /api/plan and /api/curves (microseconds on the server), drawn by charts.js. The
// page's URL holds the setup as the API's own query, so a link shares a result.
"use strict";
(() => {
  const C = TrainfitCharts;
  const $ = (id) => document.getElementById(id);
  // Settings the page leaves out: a file on the server's machine, which the API never reads.
  const hidden = new Set(["gpu_spec"]);
  let schema = null;
  const given = new Map();  // setting key -> value as text ("on"/"off" for a switch)
  let renders = 0, pending = 0, timer = null;

  const flagOf = (key) => schema.properties[key]["x-flag"].slice(2);
  const typesOf = (p) => (Array.isArray(p.type) ? p.type : [p.type]);

  function defaultText(p) {
    if (p.default === null || p.default === undefined || p.default === "") return p.enum ? "none" : "";
    return Array.isArray(p.default) ? p.default.join(",") : String(p.default === true ? "on" : p.default === false ? "off" : p.default);
  }

  // The setup as the API's query: flags without their dashes; a switch is `name=` or `no-name=`.
  function query() {
    const q = new URLSearchParams();
    for (const [key, value] of given) {
      const p = schema.properties[key];
      if (typesOf(p).includes("boolean")) q.append(value === "on" ? flagOf(key) : "no-" + flagOf(key), "");
      else q.append(flagOf(key), value);
    }
    return q.toString();
  }

  // The same setup as a POST body (with a pasted config.json), JSON keys and JSON values.
  function body(config) {
    const b = {config_json: config};
    for (const [key, value] of given) {
      if (key === "model") continue;
      const types = typesOf(schema.properties[key]);
      if (types.includes("boolean")) b[key] = value === "on";
      else if (types.includes("integer") && /^-?\d+$/.test(value)) b[key] = Number(value);
      else if (types.includes("number")) b[key] = Number(value);
      else if (types.includes("array")) b[key] = value.split(",").map((s) => s.trim()).filter((s) => s);
      else b[key] = value === "none" ? null : value;
    }
    return b;
  }

  async function call(endpoint, extra) {
    const config = $("config-json").value.trim();
    const q = query() + (extra ? "&" + extra : "");
    const response = config
      ? await fetch("/api/" + endpoint, {method: "POST", headers: {"Content-Type": "application/json"},
                                          body: JSON.stringify(Object.assign(body(config), extraBody(extra)))})
      : await fetch("/api/" + endpoint + "?" + q);
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    return data;
  }
  // A POST takes its options in the body (goal=... becomes {"goal": ...}).
  function extraBody(extra) {
    const b = {};
    for (const [k, v] of new URLSearchParams(extra || "")) b[k.replace(/-/g, "_")] = v;
    return b;
  }

  async function recompute() {
    const ticket = ++pending;
    const shareQuery = query();
    const link = location.origin + location.pathname + "?" + shareQuery;
    $("share-link").href = link;
    $("share-link").textContent = link;
    if (!$("config-json").value.trim()) history.replaceState(null, "", "?" + shareQuery);
    try {
      // The boundary of each setting is a search over every integer (about 60 plans): still
      // milliseconds. A setting whose search is refused only leaves its row out.
      const boundary = (setting) => call("plan", "largest=" + setting).then((p) => p.boundary, () => null);
      const [plan, curves, byBatch, bySeq] =
          await Promise.all([call("plan"), call("curves"), boundary("batch"), boundary("seq")]);
      if (ticket !== pending) return;  // a later change is on its way
      $("error").textContent = "";
      $("result").textContent = "";
      C.renderPlan($("result"), {plan, curves, boundaries: [byBatch, bySeq].filter((b) => b)});
    } catch (e) {
      if (ticket !== pending) return;
      $("error").textContent = e.message;
      $("result").textContent = "";
    }
    document.body.dataset.renders = String(++renders);
  }

  // A snapshot file: inflated here when gzipped (the server takes the pickle or JSON as written),
  // then posted with the setup shown as the query, so that its plan is set beside it.
  async function snapshotBytes(file) {
    const bytes = new Uint8Array(await file.arrayBuffer());
    if (bytes[0] !== 0x1f || bytes[1] !== 0x8b) return bytes;
    const inflated = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(inflated).arrayBuffer());
  }
  async function analyseSnapshot(file) {
    const out = $("snapshot-report");
    out.textContent = `reading ${file.name}...`;
    try {
      const body = await snapshotBytes(file);
      const post = (q) => fetch("/api/snapshot" + (q ? "?" + q : ""), {method: "POST", headers: {"Content-Type": "application/octet-stream"}, body});
      // With a pasted config.json the setup is not a query: the snapshot is read alone.
      const q = $("config-json").value.trim() ? "" : query();
      let response = await post(q);
      let data = await response.json();
      let note = "";
      if (!response.ok && q && !/snapshot/.test(data.error || "")) {  // the setup, not the file, was refused
        note = "the setup shown could not be planned beside it: " + data.error;
        response = await post("");
        data = await response.json();
      }
      if (!response.ok) throw new Error(data.error || response.statusText);
      out.textContent = "";
      if (note) C.html("p", {class: "note"}, note, out);
      C.renderReport("trace", data, out);
    } catch (e) {
      out.textContent = "";
      C.html("p", {class: "error"}, `${file.name}: ${e.message}`, out);
    }
    document.body.dataset.snapshots = String(Number(document.body.dataset.snapshots || 0) + 1);
  }

  // A pasted recipe: the server reads it as `plan --recipe` does (with the card shown, and the
  // objective when one is chosen); its setup then sets every control, so the plan drawn from the
  // controls is the recipe's, and the keys it ignored or the readings it made are listed.
  async function readRecipe() {
    const out = $("recipe-report");
    out.textContent = "reading the recipe...";
    try {
      const b = {recipe: $("recipe").value};
      for (const key of ["gpu", "vram", "objective"]) if (given.has(key)) b[key] = given.get(key);
      const response = await fetch("/api/plan", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(b)});
      const plan = await response.json();
      if (!response.ok) throw new Error(plan.error || response.statusText);
      given.clear();
      for (const [key, value] of Object.entries(plan.setup)) {
        if (hidden.has(key) || !schema.properties[key]) continue;
        const text = value === true ? "on" : value === false ? "off" : value === null ? "none" : Array.isArray(value) ? value.join(",") : String(value);
        given.set(key, key === "model" ? plan.model.name : text);  // the built-in the recipe's Hub id names
      }
      for (const key of Object.keys(schema.properties)) {
        const input = $("setting-" + key);
        if (input) input.value = given.get(key) || "";
      }
      $("config-json").value = "";
      $("setting-model").disabled = false;
      out.textContent = "";
      C.html("p", {class: "note"}, `read: ${plan.summary}`, out);
      for (const w of plan.warnings || []) C.html("p", {class: "note"}, w, out);
      refreshApplies();
      await recompute();
    } catch (e) {
      out.textContent = "";
      C.html("p", {class: "error"}, e.message, out);
    }
    document.body.dataset.recipes = String(Number(document.body.dataset.recipes || 0) + 1);
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(recompute, 15);
  }

  function applies(p) {
    const rule = p["x-applies-when"];
    if (!rule) return true;
    const other = given.get(rule.setting) || defaultText(schema.properties[rule.setting]);
    if (rule.one_of && !rule.one_of.includes(other)) return false;
    if (rule.none_of && rule.none_of.includes(other)) return false;
    return true;
  }
  // A setting that means nothing for the setup shown (a LoRA rank under full fine-tuning) is hidden,
  // and so is a group with nothing left to show.
  function refreshApplies() {
    for (const row of document.querySelectorAll(".control[data-key]"))
      row.hidden = !applies(schema.properties[row.dataset.key]);
    for (const group of document.querySelectorAll("#setting-controls fieldset"))
      group.hidden = ![...group.querySelectorAll(".control[data-key]")].some((row) => !row.hidden);
  }

  // The controls in the schema's groups (x-group: model and card, method, precision, step,
  // objective, layout, judging), each group in the table's order.
  function groupBox(name) {
    const id = "group-" + name.replace(/\W+/g, "-");
    return $(id) || (() => {
      const box = C.html("fieldset", {id, class: "group"}, null, $("setting-controls"));
      C.html("legend", {}, name, box);
      return box;
    })();
  }

  function control(key, p, models, gpus) {
    const row = C.html("div", {class: "control", "data-key": key, title: p.description}, null, groupBox(p["x-group"] || "other"));
    C.html("label", {for: "setting-" + key}, flagOf(key), row);
    const types = typesOf(p);
    let input;
    const options = (list, first) => {
      input = C.html("select", {id: "setting-" + key}, null, row);
      C.html("option", {value: ""}, first, input);
      for (const [value, label] of list) C.html("option", {value}, label, input);
    };
    if (key === "model") options(models.map((m) => [m.name, `${m.name} (${(m.parameters / 1e9).toFixed(1)}B)`]), "(choose a model)");
    else if (key === "gpu") options(gpus.map((g) => [g.id, `${g.id} (${(g.memory_bytes / 2 ** 30).toFixed(0)} GiB)`]), "(none: give vram)");
    else if (p.enum) options(p.enum.map((v) => [v === null ? "none" : v, v === null ? "none" : v]), `default (${defaultText(p) || "none"})`);
    else if (types.includes("boolean")) options([["on", "on"], ["off", "off"]], `default (${defaultText(p)})`);
    else {
      const numeric = (types.includes("integer") || types.includes("number")) && !types.includes("string");
      input = C.html("input", {id: "setting-" + key, type: numeric ? "number" : "text", placeholder: defaultText(p)}, null, row);
      if (numeric) {
        if (p.minimum !== undefined) input.min = p.minimum;
        if (p.maximum !== undefined) input.max = p.maximum;
        input.step = types.includes("integer") ? "1" : "any";
      }
    }
    input.value = given.get(key) || "";
    input.addEventListener("input", () => {
      if (input.value === "") given.delete(key);
      else given.set(key, input.value);
      refreshApplies();
      schedule();
    });
  }

  async function start() {
    const [s, models, gpus] = await Promise.all(["schema", "models", "gpus"].map((e) => fetch("/api/" + e).then((r) => r.json())));
    schema = s;
    const byFlag = new Map(Object.keys(schema.properties).map((k) => [flagOf(k), k]));
    const params = new URLSearchParams(location.search);
    for (const [name, value] of params) {
      const off = name.startsWith("no-") && !byFlag.has(name);
      const key = byFlag.get(off ? name.slice(3) : name);
      if (!key) continue;
      if (typesOf(schema.properties[key]).includes("boolean")) given.set(key, off || value === "false" ? "off" : "on");
      else if (value !== "") given.set(key, value);  // the no-script form's empty fields: the default
    }
    // No setup in the address: the one the server starts the page on (the seed's question).
    const start = given.size ? params : new URLSearchParams($("result").dataset.setup || "");
    if (start !== params)
      for (const [name, value] of start) given.set(byFlag.get(name), value);
    for (const key of schema["x-order"]) if (!hidden.has(key)) control(key, schema.properties[key], models, gpus);
    refreshApplies();
    $("config-json").addEventListener("input", () => {
      $("setting-model").disabled = !!$("config-json").value.trim();
      schedule();
    });
    $("recipe-button").addEventListener("click", readRecipe);
    $("advise-button").addEventListener("click", async () => {
      $("advice").textContent = "searching...";
      try {
        const advice = await call("advise", "goal=" + encodeURIComponent($("advise-goal").value));
        $("advice").textContent = "";
        C.renderAdvise($("advice"), {advice});
      } catch (e) {
        $("advice").textContent = "";
        C.html("p", {class: "error"}, e.message, $("advice"));
      }
      document.body.dataset.advised = String(Number(document.body.dataset.advised || 0) + 1);
    });
    $("snapshot-file").addEventListener("change", () => {
      if ($("snapshot-file").files.length) analyseSnapshot($("snapshot-file").files[0]);
    });
    const drop = $("snapshot-drop");
    drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
    drop.addEventListener("dragleave", () => drop.classList.remove("over"));
    drop.addEventListener("drop", (e) => {
      e.preventDefault();
      drop.classList.remove("over");
      if (e.dataTransfer.files.length) analyseSnapshot(e.dataTransfer.files[0]);
    });
    recompute();
  }

  start().catch((e) => { $("error").textContent = "cannot load the page's data: " + e.message; });
})();
