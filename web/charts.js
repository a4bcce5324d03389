// trainfit's charts: plain SVG drawn from the JSON the library writes, shared by the page of
// `trainfit serve` and every HTML report (compiled in; nothing fetched). A report calls
// TrainfitCharts.renderReport(kind, data, element); a new kind of report is one more renderer in
// `reports` below. Each figure shown is defined in docs/serve.md.
"use strict";
const TrainfitCharts = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const MiB = 1048576;
  const GiB = 1073741824;
  const palette = ["#0969da", "#8250df", "#1a7f37", "#bf8700", "#cf222e", "#0a3069", "#6e7781", "#953800",
                   "#116329", "#a475f9", "#e16f24", "#4ac26b", "#218bff", "#d4a72c"];
  const verdictColour = {fits: "#1a7f37", tight: "#9a6700", spills: "#bc4c00", oom: "#cf222e"};

  // ---- elements -------------------------------------------------------------------------------
  function svg(tag, attrs, parent) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, content, attrs) {
    const t = svg("text", Object.assign({x, y}, attrs || {}), parent);
    t.textContent = content;
    return t;
  }
  function html(tag, attrs, content, parent) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (content !== undefined && content !== null) e.textContent = content;
    if (parent) parent.appendChild(e);
    return e;
  }

  // ---- numbers and words as shown (docs/serve.md, "Figures") -------------------------------------
  const mib = (bytes) => (bytes / MiB).toFixed(1) + " MiB";
  const gib = (bytes) => (bytes / GiB).toFixed(2) + " GiB";
  const percent = (f) => (100 * f).toFixed(0) + "%";
  // As the text output writes a time (seconds_text in src/report/report_text.cpp).
  function seconds(s) {
    if (!(s > 0)) return "-";
    if (s >= 10) return s.toFixed(1) + " s";
    if (s >= 0.1) return s.toFixed(3) + " s";
    return (s * 1e3).toFixed(1) + " ms";
  }
  const secondsTick = (v) => (v > 0 ? seconds(v) : "0");
  // A JSON key in the words the text output uses for it (report_words(), served as words.js and
  // inlined in every report); a key it does not name reads with spaces for its underscores.
  const words = typeof TrainfitWords !== "undefined" ? TrainfitWords : {};
  const word = (key) => words[key] || key.replace(/_/g, " ");

  function legend(parent, items) {
    const box = html("div", {class: "legend"}, null, parent);
    for (const [name, colour] of items) {
      const item = html("span", {}, null, box);
      html("i", {style: "background:" + colour}, null, item);
      item.appendChild(document.createTextNode(name));
    }
  }

  function figure(parent, what, value, id, cls) {
    const box = html("div", {class: "figure"}, null, parent);
    html("div", Object.assign({class: "value " + (cls || "")}, id ? {id} : {}), value, box);
    html("div", {class: "what"}, what, box);
    return box;
  }

  // ---- a horizontal stacked bar: parts in order, with vertical marks --------------------------
  function stackedBar(parent, parts, marks, total, format) {
    const W = 640, H = 74, left = 8, right = 8, barY = 22, barH = 26;
    const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img"}, parent);
    const x = (v) => left + (W - left - right) * v / total;
    let at = 0;
    parts.forEach(([name, value, colour]) => {
      if (!(value > 0)) return;
      const r = svg("rect", {x: x(at), y: barY, width: Math.max(0.5, x(at + value) - x(at)), height: barH, fill: colour}, s);
      svg("title", {}, r).textContent = `${name}: ${format(value)}`;
      at += value;
    });
    for (const m of marks) {
      svg("line", {x1: x(m.value), x2: x(m.value), y1: barY - 8, y2: barY + barH + 8, stroke: m.colour,
                   "stroke-width": 2, "stroke-dasharray": m.dash ? "5 3" : ""}, s);
      text(s, x(m.value), m.top ? barY - 11 : barY + barH + 20, m.label,
           {"text-anchor": x(m.value) > W * 0.7 ? "end" : "middle", fill: m.colour});
    }
    return s;
  }

  // The memory of the step's peak against the card: every category, the allocator's reserve and the
  // CUDA context stacked to the device use, with the capacity and the headroom line.
  // `scale`: the bytes the bar's full width stands for, shared when plans are compared; by default
  // the larger of the card and the plan's device use.
  function memoryBar(parent, plan, scale) {
    const m = plan.memory, cap = plan.device.capacity_bytes;
    const headroom = plan.setup.headroom !== undefined ? plan.setup.headroom : 0.2;
    const parts = Object.entries(m.breakdown).filter(([, b]) => b > 0).map(([k, b], i) => [word(k), b, palette[i % palette.length]]);
    parts.push(["allocator reserve", m.peak_reserved_bytes - m.peak_allocated_bytes, "#afb8c1"]);
    parts.push(["CUDA context", m.device_used_bytes - m.peak_reserved_bytes, "#57606a"]);
    const total = scale || Math.max(cap, m.device_used_bytes) * 1.06;
    stackedBar(parent, parts, [
      {value: cap, label: "capacity " + gib(cap), colour: "#cf222e", top: true},
      {value: cap * (1 - headroom), label: `headroom line (${percent(headroom)} free)`, colour: "#9a6700", dash: true},
    ], total, gib);
    legend(parent, parts.filter(([, b]) => b > 0).map(([k, b, c]) => [`${k} ${gib(b)}`, c]));
  }

  // The step's time: the critical path (the terms that set its length, adding up to the step) and,
  // under it, the work that overlaps it (the host's dispatch while the GPU is the slower, or the
  // GPU's kernels while the host is), with a seconds axis and the step marked.
  function timeBar(parent, plan) {
    const time = plan.time;
    if (!time) {
      html("p", {class: "note"}, "Step time unknown: the card's throughput is not known (a card given by its memory only).", parent);
      return;
    }
    if (plan.verdict === "oom") {
      html("p", {class: "note", id: "time-none"}, "No step time: the setup runs out of memory, so no step runs.", parent);
      return;
    }
    const keys = Object.keys(time.breakdown);
    const colour = (k) => palette[keys.indexOf(k) % palette.length];
    const onPath = Object.entries(time.critical_path || time.breakdown).filter(([, v]) => v > 0);
    const under = keys.map((k) => [k, time.breakdown[k] - ((time.critical_path || {})[k] || 0)])
                      .filter(([k, v]) => k !== "pipeline_bubble" && v > 1e-9 * time.step_seconds);
    const underTotal = under.reduce((a, [, v]) => a + v, 0);
    const step = time.step_seconds;
    const ticks = linearTicks(0, Math.max(step, underTotal), 1, 5);
    const total = ticks[ticks.length - 1];
    const W = 640, H = under.length ? 104 : 74, left = 96, right = 12, barH = 22, rows = [18, 50];
    const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", id: "time-bar"}, parent);
    s.dataset.stepSeconds = String(step);
    const x = (v) => left + (W - left - right) * v / total;
    const lane = (terms, y, cls, opacity) => {
      let at = 0;
      for (const [k, v] of terms) {
        const r = svg("rect", {class: cls, x: x(at), y, width: Math.max(0.5, x(at + v) - x(at)), height: barH, fill: colour(k),
                               opacity}, s);
        r.dataset.seconds = String(v);
        svg("title", {}, r).textContent = `${word(k)}: ${seconds(v)}${cls === "overlapped" ? " (overlapped)" : ""}`;
        at += v;
      }
    };
    text(s, 0, rows[0] + 15, "critical path");
    lane(onPath, rows[0], "critical", 1);
    if (under.length) {
      text(s, 0, rows[1] + 15, "overlapped");
      lane(under, rows[1], "overlapped", 0.4);
    }
    const axis = H - 22;
    svg("line", {x1: x(0), x2: x(total), y1: axis, y2: axis, stroke: "#8c959f"}, s);
    for (const t of ticks) {
      svg("line", {x1: x(t), x2: x(t), y1: axis, y2: axis + 4, stroke: "#8c959f"}, s);
      text(s, x(t), axis + 15, secondsTick(t), {"text-anchor": "middle", fill: "#5b6470"});
    }
    svg("line", {id: "time-total-mark", x1: x(step), x2: x(step), y1: rows[0] - 6, y2: axis, stroke: "#1b1f24", "stroke-width": 2}, s);
    const label = text(s, x(step) + (x(step) > W * 0.7 ? -4 : 4), rows[0] - 8, `step ${seconds(step)}`,
                       {id: "time-total", "text-anchor": x(step) > W * 0.7 ? "end" : "start", "font-weight": 600});
    label.dataset.seconds = String(step);
    legend(parent, onPath.map(([k, v]) => [`${word(k)} ${seconds(v)}`, colour(k)])
                         .concat(under.map(([k, v]) => [`${word(k)} ${seconds(v)} (overlapped)`, colour(k)])));
  }

  // ---- axes: round ticks --------------------------------------------------------------------------
  const round12 = (v) => Number(v.toPrecision(12));
  // A tick's number as written: "16", "0.5", "1.25" (no float noise).
  const tickNumber = (v) => String(Number(v.toPrecision(6)));
  // Linear ticks 1, 2 or 5 times a power of ten apart, in the axis's unit (`unit`: what one unit
  // stands for, e.g. a GiB of bytes), from one at or below `lo` to one at or above `hi`.
  function linearTicks(lo, hi, unit, count) {
    const a = lo / unit, b = hi / unit;
    if (!Number.isFinite(a) || !Number.isFinite(b)) return [0, 1];
    const raw = (b - a) / (count || 4) || Math.abs(a) || 1;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((st) => st >= raw * (1 - 1e-9));
    const ticks = [];
    for (let k = Math.floor(a / step + 1e-9); ; k++) {
      ticks.push(round12(k * step) * unit);
      if (k * step >= b * (1 - 1e-12) - 1e-12 && ticks.length > 1) break;
    }
    return ticks;
  }
  // Logarithmic ticks at 1, 2 and 5 times the powers of ten (only the powers when that would be
  // more than ten), in the axis's unit, from one at or below `lo` to one at or above `hi` (lo > 0).
  function logTicks(lo, hi, unit) {
    const a = lo / unit, b = hi / unit;
    if (!(a > 0) || !Number.isFinite(b)) return [unit, 10 * unit];
    for (const mantissas of [[1, 2, 5], [1]]) {
      const ticks = [];
      for (let e = Math.floor(Math.log10(a)); ticks.length === 0 || ticks[ticks.length - 1] < b * (1 - 1e-12); e++)
        for (const m of mantissas) ticks.push(round12(m * Math.pow(10, e)));
      while (ticks.length > 1 && ticks[1] <= a * (1 + 1e-12)) ticks.shift();
      while (ticks.length > 1 && ticks[ticks.length - 2] >= b * (1 - 1e-12)) ticks.pop();
      if (ticks.length <= 10 || mantissas.length === 1) return ticks.map((t) => t * unit);
    }
    return [];
  }

  // ---- an x-y chart: lines, points, horizontal and vertical marks, bands ----------------------
  // The y axis is logarithmic when spec.logY is true, or "auto" and the values span more than 20
  // times; its ticks are round in spec.yUnit. Every point is drawn at its value: the axis reaches
  // the round tick past the largest. Only a spec.yMax (a ceiling that means something, 100%) clips,
  // and a clipped point gets an off-scale marker (a triangle at the edge, with its value).
  function plot(parent, spec) {
    const W = spec.width || 460, H = spec.height || 230, L = 64, R = 12, T = 14, B = 34;
    const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img"}, parent);
    const xs = spec.series.flatMap((d) => d.x).concat(spec.xExtra || []);
    const ys = spec.series.flatMap((d) => d.y.filter((v) => v !== null && v !== undefined))
                   .concat((spec.hlines || []).map((h) => h.y));
    const logX = !!spec.logX;
    const fx = (v) => (logX ? Math.log2(v) : v);
    let x0 = Math.min(...xs.map(fx)), x1 = Math.max(...xs.map(fx));
    if (!(x1 > x0)) { x0 -= 1; x1 += 1; }
    const yUnit = spec.yUnit || 1;
    const positive = ys.filter((v) => v > 0);
    const spread = positive.length ? Math.max(...positive) / Math.min(...positive) : 1;
    const logY = spec.logY === true || (spec.logY === "auto" && spread > 20 && positive.length === ys.length);
    const top = spec.yMax !== undefined ? spec.yMax : Math.max(...ys);
    const yTicks = logY ? logTicks(Math.min(...positive), top, yUnit)
                        : linearTicks(spec.yMin !== undefined ? spec.yMin : Math.min(0, ...ys), top, yUnit);
    const y0 = yTicks[0], y1 = spec.yMax !== undefined ? spec.yMax : yTicks[yTicks.length - 1];
    s.dataset.yScale = logY ? "log" : "linear";
    const px = (v) => L + (W - L - R) * (fx(v) - x0) / (x1 - x0);
    const fy = (v) => (logY ? Math.log10(v) : v);
    const rawY = (v) => H - B - (H - T - B) * (fy(v) - fy(y0)) / (fy(y1) - fy(y0));
    const offScale = (v) => !(v >= y0 * (1 - 1e-12)) || v > y1 * (1 + 1e-12) || (logY && !(v > 0));
    const py = (v) => (offScale(v) ? (v > y1 ? T : H - B) : rawY(v));
    for (const band of spec.bands || [])
      svg("rect", {x: px(band.from), y: T, width: Math.max(1, px(band.to) - px(band.from)), height: H - T - B,
                   fill: band.colour, opacity: 0.18}, s);
    for (const v of yTicks) {
      if (v > y1 * (1 + 1e-12)) continue;
      svg("line", {class: "grid", x1: L, x2: W - R, y1: rawY(v), y2: rawY(v), stroke: "#eaeef2"}, s);
      text(s, L - 4, rawY(v) + 4, spec.yFormat(v), {"text-anchor": "end", class: "y-tick"});
    }
    svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#8c959f"}, s);
    svg("line", {x1: L, x2: L, y1: T, y2: H - B, stroke: "#8c959f"}, s);
    let xTicks = spec.xTicks || [...new Set(xs)].sort((a, b) => a - b);
    if (spec.xUnit) xTicks = linearTicks(Math.min(...xs), Math.max(...xs), spec.xUnit).filter((v) => fx(v) >= x0 && fx(v) <= x1);
    const step = Math.max(1, Math.ceil(xTicks.length / 9));
    xTicks.forEach((v, i) => { if (i % step === 0) text(s, px(v), H - B + 14, spec.xFormat(v), {"text-anchor": "middle"}); });
    text(s, (L + W - R) / 2, H - 4, spec.xLabel, {"text-anchor": "middle", fill: "#5b6470"});
    const labelled = [];  // heights of the labels written: a label too close to one goes under its line
    for (const h of spec.hlines || []) {
      if (offScale(h.y)) continue;
      svg("line", {x1: L, x2: W - R, y1: py(h.y), y2: py(h.y), stroke: h.colour, "stroke-dasharray": h.dash ? "5 3" : ""}, s);
      let at = py(h.y) - 3;
      if (labelled.some((y) => Math.abs(y - at) < 12)) at = py(h.y) + 11;
      labelled.push(at);
      text(s, W - R - 2, at, h.label, {"text-anchor": "end", fill: h.colour});
    }
    for (const v of spec.vlines || []) {
      svg("line", {x1: px(v.x), x2: px(v.x), y1: T, y2: H - B, stroke: v.colour, "stroke-width": v.width || 1,
                   "stroke-dasharray": v.dash ? "4 3" : ""}, s);
      if (v.label) {
        const right = px(v.x) > (L + W - R) / 2;  // a label past the middle reads leftwards from its line
        text(s, px(v.x) + (right ? -3 : 3), T + 10 + (v.row || 0) * 12, v.label,
             {fill: v.colour, "text-anchor": right ? "end" : "start"});
      }
    }
    const drawn = (v) => v !== null && v !== undefined;
    for (const d of spec.series) {
      let path = "";
      d.x.forEach((xv, i) => {
        if (!drawn(d.y[i]) || offScale(d.y[i])) return;
        path += (path && drawn(d.y[i - 1]) && !offScale(d.y[i - 1]) ? "L" : "M") + px(xv).toFixed(1) + " " + py(d.y[i]).toFixed(1);
      });
      if (!d.pointsOnly) svg("path", {d: path, fill: "none", stroke: d.colour, "stroke-width": 1.6}, s);
      d.x.forEach((xv, i) => {
        if (!drawn(d.y[i])) return;
        const colour = d.pointColour ? d.pointColour(i) : d.colour;
        let mark;
        if (offScale(d.y[i])) {
          const up = d.y[i] > y1, x = px(xv), y = py(d.y[i]);
          mark = svg("path", {class: "off-scale", d: up ? `M${x - 5} ${y + 8}L${x + 5} ${y + 8}L${x} ${y}Z`
                                                      : `M${x - 5} ${y - 8}L${x + 5} ${y - 8}L${x} ${y}Z`, fill: colour}, s);
          svg("title", {}, mark).textContent = `${d.title ? d.title(i) : spec.yFormat(d.y[i])} (off the scale)`;
        } else if (d.points) {
          mark = svg("circle", {class: "point", cx: px(xv), cy: py(d.y[i]), r: 3, fill: colour}, s);
          if (d.title) svg("title", {}, mark).textContent = d.title(i);
        }
        if (mark) mark.dataset.value = String(d.y[i]);
      });
    }
    legend(parent, spec.series.map((d) => [d.name, d.colour]).concat((spec.legendExtra || [])));
    return s;
  }

  // Memory against one setting (seq or batch) with the out-of-memory boundary: the peak allocated
  // and the device use at each value, the card and its headroom line, and a mark past the largest
  // value that still fits.
  function curveChart(parent, curve, curves, current) {
    const pts = curve.points;
    if (!pts.length) { html("p", {class: "note"}, "No point of this curve is a valid setup.", parent); return; }
    const cap = curves.capacity_bytes;
    const vlines = [{x: current, colour: "#0969da", label: "this setup", dash: true}];
    const fitting = curve.largest_fitting;
    const next = pts.find((p) => fitting === null || p.value > fitting);
    if (next && (fitting === null || next.value > fitting) && (next.verdict === "oom" || next.verdict === "spills")) {
      const boundary = fitting === null ? next.value : Math.sqrt(fitting * next.value);
      vlines.push({x: boundary, colour: "#cf222e", label: "out of memory past here", width: 2, row: 1});
    }
    const boundaryLine = vlines.length > 1 ? vlines[1].x : null;
    plot(parent, {
      logX: true, logY: "auto", yUnit: GiB, xLabel: curve.setting === "seq" ? "sequence length (tokens)" : "micro-batch (sequences)",
      xFormat: (v) => (v >= 1024 ? v / 1024 + "k" : String(v)), yFormat: (v) => tickNumber(v / GiB) + " GiB",
      series: [
        {name: "peak allocated", colour: "#0969da", x: pts.map((p) => p.value), y: pts.map((p) => p.peak_allocated_bytes),
         points: true, pointColour: (i) => verdictColour[pts[i].verdict],
         title: (i) => `${curve.setting} ${pts[i].value}: ${gib(pts[i].peak_allocated_bytes)} peak, ${pts[i].verdict}`},
        {name: "device used", colour: "#bf8700", x: pts.map((p) => p.value), y: pts.map((p) => p.device_used_bytes)},
      ],
      hlines: [{y: cap, label: "capacity", colour: "#cf222e"},
               {y: cap * (1 - curves.headroom), label: "headroom line", colour: "#9a6700", dash: true}],
      vlines, bands: boundaryLine ? [{from: boundaryLine, to: pts[pts.length - 1].value, colour: "#cf222e"}] : [],
    });
  }

  function copyButton(parent, value) {
    const b = html("button", {type: "button", title: "copy the command"}, "copy", parent);
    b.addEventListener("click", () => {
      if (navigator.clipboard) navigator.clipboard.writeText(value).catch(() => {});
      b.textContent = "copied";
      setTimeout(() => { b.textContent = "copy"; }, 1200);
    });
  }

  // Alternatives as commands to copy: a plan's suggestions, the advisor's results.
  function commandTable(parent, rows, columns) {
    const t = html("table", {}, null, parent);
    const head = html("tr", {}, null, html("thead", {}, null, t));
    for (const [name, , num] of columns) html("th", num ? {class: "num"} : {}, name, head);
    html("th", {}, "command", head);
    const body = html("tbody", {}, null, t);
    for (const r of rows) {
      const tr = html("tr", {}, null, body);
      for (const [, value, num] of columns) {
        const v = value(r);
        const td = html("td", num ? {class: "num"} : {}, v, tr);
        if (v === r.verdict) td.className = "verdict-" + v;
      }
      const td = html("td", {}, null, tr);
      html("span", {class: "command"}, r.command, td);
      td.appendChild(document.createTextNode(" "));
      copyButton(td, r.command);
    }
    return t;
  }

  function section(root, title) {
    html("h2", {}, title, root);
    return html("div", {}, null, root);
  }

  // A table of text: `headers`, then `rows` of cells (each shown as String(cell)); `cellClass(r, c)`
  // may give a cell its class (a verdict's colour, a command's font).
  function textTable(parent, headers, rows, cellClass) {
    const t = html("table", {}, null, parent);
    const head = html("tr", {}, null, html("thead", {}, null, t));
    for (const h of headers) html("th", {}, h, head);
    const body = html("tbody", {}, null, t);
    rows.forEach((cells, r) => {
      const tr = html("tr", {}, null, body);
      cells.forEach((cell, c) => {
        const cls = cellClass ? cellClass(r, c) : "";
        html("td", cls ? {class: cls} : {}, String(cell), tr);
      });
    });
    return t;
  }

  // ---- reports -----------------------------------------------------------------------------------
  // `plan --largest batch|seq` (docs/model.md, "The boundary"): where each state ends. A value equal
  // to searched_up_to is the setting's own limit, not the card's.
  function boundaryTable(parent, boundaries) {
    const value = (b, v) => (v === 0 ? "none" : v === b.searched_up_to ? `${v} (the most it takes)` : String(v));
    const box = html("div", {class: "boundary"}, null, parent);
    textTable(box, ["setting", "runs as planned", "runs at all (the boundary)", "fails from", "advise keeps (headroom)"],
              boundaries.map((b) => [b.setting === "batch" ? "micro-batch" : "sequence length", value(b, b.largest_runs),
                                     value(b, b.largest_at_all),
                                     b.largest_at_all > 0 && b.largest_at_all < b.searched_up_to ? String(b.largest_at_all + 1) : "-",
                                     value(b, b.largest_fits)]));
    for (const b of boundaries) {
      if (b.largest_at_all > b.largest_runs)
        html("p", {class: "note"}, `${b.setting} ${b.largest_runs + 1} to ${b.largest_at_all}: runs only with the allocator ` +
                                   "freeing its cache and retrying (slower)", box);
      if (b.command) {
        const row = html("p", {}, null, box);
        html("span", {class: "command", id: "boundary-" + b.setting}, b.command, row);
        copyButton(row, b.command);
      }
    }
  }

  function renderPlan(root, data) {
    const plan = data.plan;
    const runs = plan.verdict !== "oom" && plan.time;
    // The same figures as the summary the server draws (plan_summary_html in src/report/html_report.cpp).
    const sum = html("div", {class: "summary"}, null, root);
    figure(sum, "peak allocated (torch.cuda.max_memory_allocated)", gib(plan.memory.peak_allocated_bytes), "peak-allocated");
    figure(sum, "verdict", plan.verdict, "verdict", "verdict-" + plan.verdict);
    figure(sum, "device used (nvidia-smi)", gib(plan.memory.device_used_bytes), "device-used");
    figure(sum, "card", `${plan.device.name} (${gib(plan.device.capacity_bytes)})`, "card");
    figure(sum, "step time", plan.verdict === "oom" ? "does not run" : plan.time ? seconds(plan.time.step_seconds) : "unknown", "step-time");
    figure(sum, "tokens/s", runs ? String(Math.round(plan.time.tokens_per_second)) : "-", "tokens-per-second");
    html("p", {class: "words", id: "verdict-words"}, plan.summary, root);
    memoryBar(section(root, "Memory at the peak, against the card"), plan);
    const charts = html("div", {class: "charts"}, null, root);
    const seqBox = html("div", {class: "chart", id: "curve-seq"}, null, charts);
    html("h2", {}, "Memory against sequence length", seqBox);
    curveChart(seqBox, data.curves.seq, data.curves, plan.setup.seq);
    const batchBox = html("div", {class: "chart", id: "curve-batch"}, null, charts);
    html("h2", {}, "Memory against micro-batch", batchBox);
    curveChart(batchBox, data.curves.batch, data.curves, plan.setup.batch);
    timeBar(section(root, "Step time: the critical path, and what overlaps it"), plan);
    const boundaries = data.boundaries || (plan.boundary ? [plan.boundary] : []);
    if (boundaries.length) boundaryTable(section(root, "The largest that runs, all else as set"), boundaries);
    if (plan.suggestions.length) {
      const box = section(root, plan.suggestions[0].verdict === "fits" ? "Changes that make it fit" : "Nothing fits; the nearest");
      commandTable(box, plan.suggestions, [["change", (r) => r.change], ["peak", (r) => gib(r.peak_allocated_bytes), 1],
                                           ["verdict", (r) => r.verdict],
                                           ["step", (r) => (r.verdict === "oom" ? "-" : seconds(r.step_seconds)), 1]]);
    }
  }

  function renderAdvise(root, data) {
    const a = data.advice;
    html("p", {class: "words"}, `Goal: ${a.goal}; free: ${a.free.join(", ") || "nothing"}; ${a.judged} setups judged ` +
         `of ${a.searched}.`, root);
    const columns = [["GPU", (r) => r.gpu], ["peak", (r) => gib(r.peak_allocated_bytes), 1],
                     ["free", (r) => percent(r.headroom_fraction), 1], ["step", (r) => seconds(r.step_seconds), 1],
                     ["tokens/s", (r) => String(Math.round(r.tokens_per_second)), 1], ["why", (r) => r.why || ""]];
    commandTable(section(root, "Best setups that fit"), a.results, columns);
    // Every setup shown, peak memory against speed; the Pareto front joined.
    const box = section(root, "Memory against speed: the results, and the setups no other beats on both (joined)");
    const front = a.pareto.slice().sort((p, q) => p.peak_allocated_bytes - q.peak_allocated_bytes);
    plot(box, {xLabel: "peak allocated (GiB)", xUnit: GiB, xFormat: (v) => tickNumber(v / GiB), yFormat: (v) => tickNumber(v), width: 640,
               hlines: [], yMin: 0,
               series: [{name: "Pareto front (tokens/s)", colour: "#8c959f", x: front.map((r) => r.peak_allocated_bytes),
                         y: front.map((r) => r.tokens_per_second)},
                        {name: "results", colour: "#0969da", pointsOnly: true, points: true, x: a.results.map((r) => r.peak_allocated_bytes),
                         y: a.results.map((r) => r.tokens_per_second), title: (i) => a.results[i].command}]});
  }

  function renderBench(root, doc) {
    html("p", {class: "words"}, doc.plan.description || "", root);
    textTable(section(root, "Criteria"), ["criterion", "outcome", "detail", "expression"],
              doc.criteria.map((c) => [`${c.name}: ${c.text}`, c.outcome, c.detail ?? "", c.expression ?? ""]),
              (r, c) => (c === 1 ? "verdict-" + doc.criteria[r].outcome : c === 3 ? "command" : ""));
    const rows = doc.rows;
    const labels = rows.map((r) => r.bench.label);
    const measured = rows.map((r) => (r.measured.peak_allocated_mib !== undefined ? r.measured.peak_allocated_mib : null));
    const predicted = rows.map((r) => (r.predicted && r.predicted.peak_allocated_mib !== undefined ? r.predicted.peak_allocated_mib : null));
    const box = section(root, `Peak allocated, measured beside predicted (median |error| ${percent(doc.accuracy.peak_allocated_median_abs_error)}, ` +
                              `max ${percent(doc.accuracy.peak_allocated_max_abs_error)})`);
    const idx = rows.map((_, i) => i + 1);
    const capMiB = rows.map((r) => r.capacity_mib).find((c) => c) || null;
    plot(box, {xLabel: "config #", xFormat: String, yUnit: 1024, yFormat: (v) => tickNumber(v / 1024) + " GiB", width: 900,
               series: [{name: "measured", colour: "#1a7f37", x: idx, y: measured, points: true, title: (i) => labels[i]},
                        {name: "predicted", colour: "#0969da", x: idx, y: predicted, points: true, title: (i) => labels[i]}],
               hlines: capMiB ? [{y: capMiB, label: "card", colour: "#cf222e"}] : []});
    textTable(section(root, "Configs"), ["#", "config", "status", "verdict", "peak MiB", "pred MiB", "s/step", "pred s"],
              rows.map((r, i) => {
                const p = r.predicted || {};
                return [i + 1, labels[i], r.measured.status, r.verdict || "", measured[i] ?? "-", predicted[i] !== null ? predicted[i].toFixed(1) : "-",
                        r.measured.step_seconds_median !== undefined ? r.measured.step_seconds_median.toFixed(3) : "-",
                        p.step_seconds !== undefined ? p.step_seconds.toFixed(3) : "-"];
              }));
  }

  function renderValidate(root, data) {
    const rows = data.rows;
    html("p", {class: "words"}, `${rows.length} rows: peak allocated median |error| ${(100 * data.median_abs_error).toFixed(1)}%, ` +
         `max ${(100 * data.max_abs_error).toFixed(1)}%; step time median |error| ${(100 * data.median_abs_step_error).toFixed(1)}%, ` +
         `max ${(100 * data.max_abs_step_error).toFixed(1)}%.`, root);
    const charts = html("div", {class: "charts"}, null, root);
    const mem = html("div", {class: "chart"}, null, charts);
    html("h2", {}, "Peak allocated: predicted against measured", mem);
    const most = Math.max(...rows.map((r) => Math.max(r.measured_peak_allocated_mib, r.predicted_peak_allocated_mib)));
    plot(mem, {xLabel: "measured (GiB)", xUnit: 1024, xFormat: (v) => tickNumber(v / 1024), yUnit: 1024,
               yFormat: (v) => tickNumber(v / 1024) + " GiB", xExtra: [0, most],
               series: [{name: "predicted = measured", colour: "#8c959f", x: [0, most], y: [0, most]},
                        {name: "rows", colour: "#0969da", pointsOnly: true, points: true, x: rows.map((r) => r.measured_peak_allocated_mib),
                         y: rows.map((r) => r.predicted_peak_allocated_mib), title: (i) => `line ${rows[i].line} ${rows[i].model}: ${(100 * rows[i].error).toFixed(1)}%`}]});
    const err = html("div", {class: "chart"}, null, charts);
    html("h2", {}, "Error of each row", err);
    plot(err, {xLabel: "row", xFormat: String, yUnit: 0.01, yFormat: (v) => tickNumber(100 * v) + "%", yMin: Math.min(0, ...rows.map((r) => r.step_error), ...rows.map((r) => r.error)),
               series: [{name: "peak allocated error", colour: "#0969da", pointsOnly: true, points: true, x: rows.map((_, i) => i + 1), y: rows.map((r) => r.error)},
                        {name: "step time error", colour: "#bf8700", pointsOnly: true, points: true, x: rows.map((_, i) => i + 1),
                         y: rows.map((r) => (r.measured_step_seconds === null ? null : r.step_error))}],
               hlines: [{y: 0, label: "", colour: "#8c959f"}]});
    textTable(section(root, "Rows"), ["line", "model", "MiB measured", "MiB predicted", "error", "s measured", "s predicted", "error", "bottleneck"],
              rows.map((r) => [r.line, r.model, r.measured_peak_allocated_mib.toFixed(1), r.predicted_peak_allocated_mib.toFixed(1), (100 * r.error).toFixed(1) + "%",
                               r.measured_step_seconds === null ? "-" : r.measured_step_seconds.toFixed(4), r.predicted_step_seconds.toFixed(4),
                               r.measured_step_seconds === null ? "-" : (100 * r.step_error).toFixed(0) + "%", r.predicted_bottleneck]));
  }

  const watchColours = {"compute-bound": "#1a7f37", "input-pipeline-bound": "#bf8700", "communication-bound": "#8250df",
                        "capacity-bound": "#cf222e", "host-spill-suspected": "#bc4c00", throttled: "#953800",
                        "host-bound": "#0969da", idle: "#d0d7de", "memory-growing": "#a475f9", straggler: "#e16f24"};
  function renderWatch(root, data) {
    html("p", {class: "words"}, `${data.source}: ${data.samples} samples, ${data.probe_steps} probe steps; verdicts over windows of ` +
         `${data.window_seconds} s.`, root);
    for (const g of data.gpus) {
      const spans = data.verdicts.filter((v) => v.gpu === g.index);
      const bands = spans.map((v) => ({from: v.begin, to: Math.max(v.end, v.begin + 0.5), colour: watchColours[v.verdict] || "#8c959f"}));
      const extra = [...new Set(spans.map((v) => v.verdict))].map((v) => [v, watchColours[v] || "#8c959f"]);
      const charts = html("div", {class: "charts"}, null, section(root, `GPU ${g.index} ${g.name}`));
      const u = html("div", {class: "chart"}, null, charts);
      plot(u, {xLabel: "seconds", xUnit: 1, xFormat: (v) => tickNumber(v), yFormat: (v) => tickNumber(v) + "%", yMax: 100, yMin: 0, bands, legendExtra: extra,
               series: [{name: "GPU utilisation", colour: "#0969da", x: g.time, y: g.gpu_util_percent}]});
      const m = html("div", {class: "chart"}, null, charts);
      plot(m, {xLabel: "seconds", xUnit: 1, xFormat: (v) => tickNumber(v), yUnit: GiB, yFormat: (v) => tickNumber(v / GiB) + " GiB", bands,
               series: [{name: "memory used", colour: "#bf8700", x: g.time, y: g.memory_used_bytes}],
               hlines: g.memory_total_bytes ? [{y: g.memory_total_bytes, label: "card", colour: "#cf222e"}] : []});
    }
    if (data.steps.length) {
      plot(section(root, "Step time (probe)"), {xLabel: "seconds", xUnit: 1, xFormat: (v) => tickNumber(v), yFormat: secondsTick, width: 900,
               series: [{name: "step seconds", colour: "#8250df", x: data.steps.map((s) => s.time), y: data.steps.map((s) => s.step_seconds), points: true}]});
    }
    textTable(section(root, "Verdicts over time"), ["GPU", "from s", "to s", "verdict", "evidence", "what to try"],
              data.verdicts.map((v) => [v.gpu, v.begin.toFixed(0), v.end.toFixed(0), v.verdict, v.evidence, v.advice]));
  }

  // The letters of a step's timeline (docs/trace.md, StepTrace::timeline) and their colours.
  const timelineStates = {M: ["matmul", "#0969da"], A: ["attention", "#1a7f37"], E: ["elementwise", "#bf8700"],
                          O: ["optimizer", "#8250df"], C: ["communication", "#cf222e"], H: ["host-device copies", "#953800"],
                          D: ["device copies", "#6e7781"], i: ["idle: input wait", "#e16f24"], s: ["idle: synchronisation", "#a475f9"],
                          h: ["idle: host launching", "#d0d7de"]};
  function stepTimeline(parent, step, longest) {
    const W = 900, H = 30, left = 170, right = 8, barH = 18;
    const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img"}, parent);
    text(s, 0, 18, `${step.name} ${seconds(step.wall_s)}`, {"font-size": 12});
    const width = (W - left - right) * step.wall_s / longest, n = step.timeline.length;
    // Runs of one state are one rectangle: a few dozen per step instead of one per slice.
    for (let k = 0; k < n;) {
      let end = k;
      while (end < n && step.timeline[end] === step.timeline[k]) ++end;
      const [name, colour] = timelineStates[step.timeline[k]] || ["?", "#8c959f"];
      const r = svg("rect", {x: left + width * k / n, y: 4, width: Math.max(0.5, width * (end - k) / n), height: barH, fill: colour}, s);
      svg("title", {}, r).textContent = `${name}: ${seconds(step.wall_s * (end - k) / n)} from ${seconds(step.wall_s * k / n) === "-" ? "0" : seconds(step.wall_s * k / n)}`;
      k = end;
    }
  }
  // The out-of-memory error a snapshot recorded: the request, what the allocator held, and whether
  // the free memory was there but in pieces (fragmentation) or not there at all.
  function oomSection(root, oom) {
    const box = section(root, `Out of memory: a request of ${mib(oom.requested_bytes)} failed`);
    const sum = html("div", {class: "summary"}, null, box);
    figure(sum, "the failed request", mib(oom.requested_bytes), "oom-request");
    figure(sum, "allocated at the error", mib(oom.allocated_bytes), "oom-allocated");
    figure(sum, "reserved at the error", mib(oom.reserved_bytes), "oom-reserved");
    figure(sum, "cached free", mib(oom.cached_free_bytes), "oom-cached-free");
    figure(sum, "largest free block", mib(oom.largest_free_block_bytes), "oom-largest-block");
    html("p", {class: "words", id: "oom-why"},
         oom.fragmentation
           ? `Fragmentation: the allocator held ${mib(oom.cached_free_bytes)} free, more than the request, but in no block ` +
             `of ${mib(oom.requested_bytes)}. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets a segment grow instead of leaving gaps.`
           : `Not fragmentation: the request was ${mib(oom.requested_bytes - oom.cached_free_bytes)} more than all the allocator held free.`,
         box);
    if (oom.limit_needed_bytes !== null && oom.limit_needed_bytes !== undefined)
      html("p", {class: "words", id: "oom-limit-needed"},
           `Replayed through the caching allocator's rules, this history gets past the request with an allocator limit of ` +
           `${mib(oom.limit_needed_bytes)} or more; were no free memory stranded, ${mib(oom.unstranded_need_bytes)} (allocated + request).`, box);
    html("p", {class: "note"}, "the request: " + oom.moment, box);
    const parts = Object.entries(oom.breakdown).filter(([, b]) => b >= 0.1 * MiB)
                        .map(([k, b], i) => [k, b, k === "cached_free" ? "#afb8c1" : palette[i % palette.length]]);
    stackedBar(box, parts, [], oom.reserved_bytes * 1.02 || 1, mib);
    legend(box, parts.map(([k, b, c]) => [`${word(k)} ${mib(b)}`, c]));
    if (oom.top_stacks && oom.top_stacks.length)
      textTable(section(box, "Largest allocation stacks at the error"), ["MiB", "blocks", "category", "frames"],
                oom.top_stacks.map((a) => [(a.bytes / MiB).toFixed(1), a.blocks, a.category, a.frames]));
  }

  function renderTrace(root, data) {
    const ranks = data.ranks || [];
    for (const r of ranks) {
      const more = (r.sources || []).length - 1;  // a process's later profiling cycles, read with it
      const title = `${ranks.length > 1 ? `rank ${r.rank}: ` : ""}${r.source.split("/").pop()}` +
                    `${more > 0 ? ` and ${more} more file${more === 1 ? "" : "s"} of its process` : ""}: ` +
                    `${r.device >= 0 ? `${r.device_name || "GPU"} ${r.device}` : "no GPU activity"}, ` +
                    `${r.steps.length} step${r.steps.length === 1 ? "" : "s"}: ${r.verdict || "no verdict"}`;
      const box = section(root, title);
      html("p", {class: "words"}, r.evidence, box);
      const timed = r.steps.filter((st) => st.timeline);
      if (timed.length) {
        html("h3", {}, "Each step in time order (what filled each slice of it)", box);
        const longest = Math.max(...timed.map((st) => st.wall_s));
        for (const st of timed) stepTimeline(box, st, longest);
        const seen = new Set(timed.flatMap((st) => [...st.timeline]));
        legend(box, Object.entries(timelineStates).filter(([k]) => seen.has(k)).map(([, v]) => v));
        html("h3", {}, "Where each step's time went", box);
        const steps = r.steps.map((_, i) => i + 1);
        plot(box, {xLabel: "step", xFormat: String, yFormat: secondsTick, width: 900,
                   series: [{name: "wall", colour: "#57606a", x: steps, y: r.steps.map((st) => st.wall_s), points: true},
                            {name: "GPU busy", colour: "#0969da", x: steps, y: r.steps.map((st) => st.gpu_busy_s), points: true},
                            {name: "input wait", colour: "#e16f24", x: steps, y: r.steps.map((st) => st.input_wait_s), points: true},
                            {name: "host", colour: "#8c959f", x: steps, y: r.steps.map((st) => st.host_wait_s), points: true},
                            {name: "communication", colour: "#cf222e", x: steps, y: r.steps.map((st) => st.communication_s), points: true}]});
      }
      if (r.kernels_top && r.kernels_top.length) {
        textTable(section(box, "Top kernels"), ["total", "count", "category", "name"],
                  r.kernels_top.map((k) => [seconds(k.total_s), k.count, k.category, k.name.length > 140 ? k.name.slice(0, 140) + "..." : k.name]));
      }
      for (const w of r.warnings || []) html("p", {class: "note"}, "note: " + w, box);
    }
    if (data.straggler_check) html("p", {class: "words"}, "straggler: " + data.straggler_check, root);
    for (const w of data.skipped || []) html("p", {class: "note"}, "skipped: " + w, root);
    if (data.snapshot && data.snapshot.oom) oomSection(root, data.snapshot.oom);
    if (data.snapshot) {
      const snap = data.snapshot;
      const box = section(root, `Memory snapshot: peak allocated ${mib(snap.peak_allocated_bytes)}` +
                                (snap.allocator_peak_allocated_bytes ? ` (the allocator's own peak ${mib(snap.allocator_peak_allocated_bytes)})` : ""));
      html("p", {class: "words"}, "peak moment: " + (snap.peak_moment || "-"), box);
      // Categories under 0.1 MiB at the peak (a few stray bytes) would only crowd the legend.
      const parts = Object.entries(snap.breakdown).filter(([, b]) => b >= 0.1 * MiB).map(([k, b], i) => [k, b, k === "cached_free" ? "#afb8c1" : palette[i % palette.length]]);
      const total = parts.reduce((a, [, b]) => a + b, 0) * 1.02 || 1;
      stackedBar(box, parts, [], total, mib);
      legend(box, parts.map(([k, b, c]) => [`${word(k)} ${mib(b)}`, c]));
      if (snap.top_stacks && snap.top_stacks.length) {
        textTable(section(box, "Largest allocation stacks at the peak"), ["MiB", "blocks", "category", "frames"],
                  snap.top_stacks.map((a) => [(a.bytes / MiB).toFixed(1), a.blocks, a.category, a.frames]));
      }
    }
    if (data.plan) {
      const box = section(root, "Beside the plan");
      if (data.plan.largest_disagreement) html("p", {class: "words"}, "largest disagreement: " + data.plan.largest_disagreement, box);
      for (const [what, format] of [["time", seconds], ["memory", mib]]) {
        const rows = data.plan[what] || [];
        if (!rows.length) continue;
        textTable(box, [what + " term", "measured", "predicted"],
                  rows.map((row) => [row.term, format(row.measured), format(row.predicted)]));
      }
    }
  }

  // Several plans side by side (`plan` without --model: the seed's question): each one's memory
  // against the card, then the table the CLI prints.
  function renderPlans(root, doc) {
    html("p", {class: "words"}, doc.title, root);
    textTable(section(root, "Plans"), ["model", "checkpointing", "peak allocated", "of card", "device used", "verdict", "step", "bottleneck"],
              doc.plans.map((p) => [p.model.name, p.setup.grad_ckpt ? "on" : "off", gib(p.memory.peak_allocated_bytes),
                                    percent(p.memory.peak_allocated_bytes / p.device.capacity_bytes), gib(p.memory.device_used_bytes), p.verdict,
                                    p.time && p.verdict !== "oom" ? seconds(p.time.step_seconds) : "-",
                                    p.time && p.verdict !== "oom" ? p.time.bottleneck : "-"]),
              (r, c) => (c === 5 ? "verdict-" + doc.plans[r].verdict : ""));
    // One scale for every bar, so that the bars compare.
    const scale = Math.max(...doc.plans.map((p) => Math.max(p.device.capacity_bytes, p.memory.device_used_bytes))) * 1.06;
    for (const p of doc.plans) {
      const box = section(root, `${p.model.name}, checkpointing ${p.setup.grad_ckpt ? "on" : "off"}: ${p.verdict}`);
      memoryBar(box, p, scale);
    }
  }

  const reports = {plans: renderPlans, plan: renderPlan, advise: renderAdvise, bench: renderBench, validate: renderValidate, watch: renderWatch,
                   trace: renderTrace};
  function renderReport(kind, data, root) {
    root.textContent = "";
    if (!reports[kind]) { html("p", {class: "error"}, "no renderer for a report of kind " + kind, root); return; }
    reports[kind](root, data);
  }

  return {renderReport, renderPlan, renderAdvise, memoryBar, curveChart, timeBar, commandTable, plot,
          legend, figure, html, mib, gib, seconds, percent, reports};
})();
