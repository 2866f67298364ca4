// little-workflow inspector: draws a run page (header, timeline, event table) or the
// runs list from the JSON embedded in #lw-data. No network access except the optional
// live endpoint of `little ui` (config.liveUrl). Hooks for tests and scripts: step bars
// carry data-step-path / data-status / data-attempts, event rows data-event-seq /
// data-event-type, filters data-filter="type" / "status"; filter state lives in the URL
// hash (#type=step.failed&q=text&step=path) so a link or a test can set it.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("lw-data").textContent);
  const CONFIG = JSON.parse(document.getElementById("lw-config").textContent);
  const app = document.getElementById("app");
  const ROW_H = 24; // event table row height (px); rows are fixed-height for virtualization
  const TL_ROW_H = 22; // timeline row height (px)
  const TL_ALL = 2000; // up to this many timeline rows are all drawn; beyond, only those in view
  let tl = null;
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);

  // ---- small helpers ---------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "style") node.setAttribute("style", v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  function fmtDur(s) {
    if (s === null || s === undefined || isNaN(s)) return "–";
    if (s < 0) s = 0;
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
    const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (d) return d + "d " + (h % 24) + "h";
    if (h) return h + "h " + (m % 60) + "m";
    return m + "m " + Math.round(s % 60) + "s";
  }
  function fmtTime(epoch) {
    if (!epoch && epoch !== 0) return "–";
    return new Date(epoch * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }
  // The runs list and the run page count alike: from run.created to the run's end, or to
  // now for an unfinished run.
  function runDuration(r) {
    return r.durationSeconds === null || r.durationSeconds === undefined
      ? fmtDur(Date.now() / 1000 - r.startedAt) + " so far" : fmtDur(r.durationSeconds);
  }
  function runHref(runId) { return (CONFIG.runLink || "{runId}.html").replace("{runId}", encodeURIComponent(runId)); }
  function json(v) { return JSON.stringify(v, null, 2); }
  function pretty(text) { try { return json(JSON.parse(text)); } catch (e) { return text; } }
  function hashParams() { return new URLSearchParams(location.hash.replace(/^#/, "")); }
  function setHash(params) {
    const s = params.toString();
    history.replaceState(null, "", s ? "#" + s : location.pathname + location.search);
  }
  function badge(status) { return el("span", { class: "badge s-" + status, "data-run-status": status }, status); }

  // ---- time scale with compressed idle gaps --------------------------------------------
  // Active time (attempts running, events happening) maps linearly; a gap long enough to
  // dominate the axis (a sleep, a wait, a process that was down) gets a fixed narrow slot.
  // Uncompressed time is never drawn larger than MIN_SPAN seconds per axis width, so a
  // step of a few milliseconds stays a thin mark (1 ms is at most 1/50 of the axis): a
  // run of milliseconds, or of milliseconds of work between long waits, ends before the
  // axis does.
  const MIN_SPAN = 0.05;
  function buildScale(intervals, total) {
    total = Math.max(total, 1e-6);
    const iv = intervals.map(([a, b]) => [Math.max(0, a), Math.min(total, Math.max(a, b))])
      .sort((x, y) => x[0] - y[0]);
    const merged = [];
    for (const [a, b] of iv) {
      const last = merged[merged.length - 1];
      if (last && a <= last[1]) last[1] = Math.max(last[1], b); else merged.push([a, b]);
    }
    const gaps = [];
    let cursor = 0;
    for (const [a, b] of merged) { if (a > cursor) gaps.push([cursor, a]); cursor = Math.max(cursor, b); }
    if (cursor < total) gaps.push([cursor, total]);
    gaps.sort((x, y) => (y[1] - y[0]) - (x[1] - x[0]));
    let kept = total;
    const compressed = [];
    for (const g of gaps) {
      const len = g[1] - g[0];
      if (compressed.length >= 24 || len <= 0.25 * (kept - len) || len < 0.01) break; // a gap of ms is shown as it is
      compressed.push(g); kept -= len;
    }
    compressed.sort((x, y) => x[0] - y[0]);
    const slot = compressed.length ? Math.min(0.06, 0.3 / compressed.length) : 0;
    const perSec = Math.min((1 - slot * compressed.length) / Math.max(kept, 1e-6), 1 / MIN_SPAN);
    const segs = []; // [t0, t1, f0, f1, compressed]
    let t = 0, f = 0;
    for (const [a, b] of compressed) {
      if (a > t) { segs.push([t, a, f, f + (a - t) * perSec, false]); f += (a - t) * perSec; }
      segs.push([a, b, f, f + slot, true]); f += slot; t = b;
    }
    if (t < total || !segs.length) { segs.push([t, total, f, f + (total - t) * perSec, false]); f += (total - t) * perSec; }
    const endF = Math.min(1, f);
    function x(time) {
      if (time <= 0) return 0;
      if (time >= total) return endF;
      let lo = 0, hi = segs.length - 1;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (segs[mid][1] < time) lo = mid + 1; else hi = mid; }
      const s = segs[lo];
      return s[1] > s[0] ? s[2] + (s[3] - s[2]) * (time - s[0]) / (s[1] - s[0]) : s[2];
    }
    return { x, segs, total, endF };
  }
  const pct = (f) => (f * 100).toFixed(4) + "%";

  // ---- run page --------------------------------------------------------------------
  const state = { type: "", q: "", step: "", selected: null, filtered: null, events: [] };

  function header(d) {
    const rows = [
      ["workflow", d.workflowId || "–"], ["version", d.version || "–"],
      ["status", badge(d.status)], ["started", fmtTime(d.startedAt)],
      ["duration", runDuration(d)],
      ["events", String(d.events.length)], ["steps", String(d.steps.length)],
    ];
    if (d.queue) rows.push(["queue", el("span", { "data-queue": d.queue.name }, d.queue.name +
      (d.queue.key != null ? " · key " + d.queue.key : "") + " · priority " + d.queue.priority)]);
    if (d.starts.length > 1) rows.push(["starts", d.starts.length + " (resumed " + (d.starts.length - 1) + "×)"]);
    if (d.waitingFor) rows.push(["waiting for", el("span", { class: "waiting", "data-waiting-for": "" }, d.waitingFor)]);
    if (d.forkedFrom) rows.push(["forked from", el("span", {},
      el("a", { href: runHref(d.forkedFrom.runId), "data-fork-source": d.forkedFrom.runId }, d.forkedFrom.runId),
      d.forkedFrom.stepPath ? " at step " + d.forkedFrom.stepPath : "")]);
    if (d.subRuns.length) rows.push(["sub-runs", el("span", { class: "subruns" }, d.subRuns.map((s) =>
      el("span", { class: "subrun" }, el("a", { href: runHref(s.runId), "data-sub-run": s.runId }, s.runId),
        " (" + (s.workflow || "?") + ", " + s.status + ")")))]);
    const io = [el("div", { class: "io" }, el("h3", {}, "input"), el("pre", { "data-field": "input" }, json(d.input)))];
    if (d.error && d.status === "cancelled" && !d.error.message) io.push(el("div", { class: "io err" }, el("h3", {}, "cancelled"),
      el("pre", { "data-field": "error" }, d.error.reason ? "cancelled: " + d.error.reason : "cancelled (no reason given)")));
    else if (d.error) io.push(el("div", { class: "io err" }, el("h3", {}, "error"),
      el("pre", { "data-field": "error" }, (d.error.type ? d.error.type + ": " : "") + (d.error.message || json(d.error)))));
    else if (d.status === "completed") io.push(el("div", { class: "io" }, el("h3", {}, "output"),
      el("pre", { "data-field": "output" }, json(d.output))));
    if (d.traceback) io.push(el("div", { class: "io err tb" }, el("h3", {}, "traceback"),
      el("pre", { "data-field": "traceback" }, d.userTraceback || d.traceback)));
    return el("header", {},
      CONFIG.actions ? actionsPanel(d) : null,
      el("div", { class: "top" }, CONFIG.backLink ? el("a", { href: CONFIG.backLink, class: "back" }, "← runs") : null,
        el("h1", {}, d.workflowId || "run", " ", el("small", { "data-run-id": d.runId }, d.runId)), badge(d.status),
        CONFIG.liveUrl && !d.finished ? el("span", { class: "live" }, "● live") : null),
      el("dl", {}, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
      el("div", { class: "ios" }, io));
  }

  // ---- actions (little ui only): POSTs carrying the server's token ------------------
  // The token comes in the URL `little ui` printed (?token=...); the tab keeps it in
  // sessionStorage and takes it out of the address bar, so run pages opened from the list
  // can act too. Field values and the last answer survive the live re-renders.
  const TOKEN_KEY = "little-ui-token";
  (function takeToken() {
    const params = new URLSearchParams(location.search);
    const given = params.get("token");
    if (!given) return;
    try { sessionStorage.setItem(TOKEN_KEY, given); } catch (e) { /* storage off: keep it in the URL */ return; }
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
  })();
  function uiToken() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return new URLSearchParams(location.search).get("token") || ""; }
  }
  const fields = {};
  let answer = null; // {ok, text, link}
  function field(name, attrs, tag) {
    const node = el(tag || "input", Object.assign({ "data-field": name, "aria-label": name,
      oninput: () => { fields[name] = node.value; } }, attrs));
    if (fields[name] !== undefined) node.value = fields[name];
    else if (attrs && attrs.value !== undefined) fields[name] = attrs.value;
    return node;
  }
  async function act(path, body, describe) {
    answer = { ok: null, text: "…" };
    showAnswer();
    try {
      const resp = await fetch(path, { method: "POST", cache: "no-store",
        headers: { "Content-Type": "application/json", "X-Little-Token": uiToken() }, body: JSON.stringify(body || {}) });
      const reply = await resp.json().catch(() => ({ error: resp.status + " " + resp.statusText }));
      answer = resp.ok ? Object.assign({ ok: true }, describe(reply))
        : { ok: false, text: resp.status + ": " + (reply.error || resp.statusText) };
    } catch (e) {
      answer = { ok: false, text: "the server did not answer: " + e };
    }
    showAnswer();
    refreshNow();
  }
  function showAnswer() {
    const node = document.querySelector("[data-action-result]");
    if (!node) return;
    node.className = "answer " + (answer === null ? "" : answer.ok === true ? "ok" : answer.ok === false ? "err" : "");
    node.replaceChildren(answer ? answer.text : "");
    if (answer && answer.link) node.append(" ", el("a", { href: runHref(answer.link), "data-forked-run": answer.link }, answer.link));
  }
  function runApi(d, action) { return "/api/runs/" + encodeURIComponent(d.runId) + "/" + action; }
  function actionsPanel(d) {
    const open = !d.finished;
    const waitNames = (d.idle || []).filter((w) => w.end === null && w.kind === "wait").map((w) => w.name);
    const controls = [];
    if (open) {
      controls.push(el("div", { class: "act" },
        field("reason", { placeholder: "reason (optional)" }),
        el("button", { "data-action": "cancel", onclick: () => act(runApi(d, "cancel"), { reason: fields.reason || null },
          (r) => ({ text: r.status === "cancelled" ? "cancelled"
            : "cancel requested: it is " + r.status + " elsewhere and stops at its next step, sleep or wait" })) }, "cancel run")));
      controls.push(el("div", { class: "act" },
        field("event-name", { placeholder: "event name", value: waitNames[0] || "" }),
        field("event-payload", { placeholder: "payload (JSON)", value: "null" }),
        el("button", { "data-action": "send", onclick: () => {
          let payload;
          try { payload = JSON.parse(fields["event-payload"] || "null"); } catch (e) { answer = { ok: false, text: "payload: not valid JSON: " + e.message }; showAnswer(); return; }
          act(runApi(d, "events"), { name: fields["event-name"] || "", payload }, (r) => ({ text: "sent (event " + r.sequence + ")" }));
        } }, "send event")));
      controls.push(el("div", { class: "act" },
        el("button", { "data-action": "resume", title: "run it here now, as a worker would (little ui MODULE gives the code)",
          onclick: () => act(runApi(d, "resume"), {}, () => ({ text: "resuming…" })) }, "resume")));
    }
    if ((d.forkPoints || []).length) {
      const failed = d.steps.find((s) => s.status === "failed");
      controls.push(el("div", { class: "act" },
        forkSelect(d, failed),
        el("button", { "data-action": "fork", onclick: () => act(runApi(d, "fork"), { fromStep: fields["fork-from"] || null },
          (r) => ({ text: "forked:", link: r.runId })) }, "fork from step")));
    }
    const panel = el("div", { class: "actions", "data-actions": "" },
      approvalsList(d.approvals || [], false),
      controls, el("span", { "data-action-result": "" }),
      uiToken() ? null : el("small", { class: "notoken" }, "to act, open the URL little ui printed (it carries ?token=…)"));
    requestAnimationFrame(showAnswer);
    return panel;
  }
  // Pending tool calls (lw.pending_approvals): approve, or deny with the reason field.
  function approvalsList(approvals, showRun) {
    if (!approvals.length) return null;
    return el("div", { class: "approvals", "data-approvals": "" }, el("h3", {}, "pending approvals (" + approvals.length + ")"),
      approvals.map((a) => {
        const path = "/api/runs/" + encodeURIComponent(a.runId) + "/approve/" + encodeURIComponent(a.toolCallId);
        return el("div", { class: "act approval", "data-approval": a.toolCallId, "data-approval-run": a.runId },
          showRun ? el("a", { href: runHref(a.runId) }, a.runId) : null,
          el("span", {}, el("b", {}, a.toolName), " ", el("code", {}, JSON.stringify(a.args))),
          el("button", { "data-action": "approve", onclick: () => act(path, { approved: true },
            () => ({ text: "approved " + a.toolName + " (" + a.toolCallId + ")" })) }, "approve"),
          el("button", { "data-action": "deny", onclick: () => act(path, { approved: false, reason: fields.reason || null },
            () => ({ text: "denied " + a.toolName + " (" + a.toolCallId + ")" })) }, "deny"));
      }));
  }
  function forkSelect(d, failed) {
    const pick = fields["fork-from"] ?? (failed ? failed.path : d.forkPoints[d.forkPoints.length - 1]);
    fields["fork-from"] = pick;
    const node = el("select", { "data-field": "fork-from", "aria-label": "fork from step", onchange: () => { fields["fork-from"] = node.value; } },
      d.forkPoints.map((p) => el("option", { value: p }, p)));
    node.value = pick;
    return node;
  }

  function timelineRows(d, end) {
    const rows = [];
    const stepPaths = new Set(d.steps.map((s) => s.path));
    const groups = new Map();
    for (const s of d.steps) {
      const start = s.spans.length ? s.spans[0].start : null;
      rows.push({ kind: "step", step: s, start, path: s.path });
      const cut = s.path.lastIndexOf("/");
      if (cut > 0) {
        const parent = s.path.slice(0, cut);
        if (!stepPaths.has(parent)) {
          const g = groups.get(parent) || { kind: "group", path: parent, start: Infinity, end: 0, n: 0 };
          g.n++; g.start = Math.min(g.start, start ?? end);
          g.end = Math.max(g.end, ...s.spans.map((a) => a.end ?? end), g.start);
          groups.set(parent, g);
        }
      }
    }
    for (const g of groups.values()) rows.push(g);
    for (const w of d.idle) rows.push({ kind: "idle", idle: w, start: w.start, path: w.stepPath });
    for (const c of d.subRuns) rows.push({ kind: "call", call: c, start: c.start, path: c.callPath });
    // Time order; a group header just before its first child.
    rows.forEach((r, i) => { r.i = i; r.key = (r.start ?? end); });
    rows.sort((a, b) => a.key - b.key || (a.kind === "group" ? -1 : b.kind === "group" ? 1 : a.i - b.i));
    return rows;
  }

  function timeline(d) {
    const end = d.finished ? d.durationSeconds : Math.max(lastT(d), nowT(d));
    const intervals = [];
    for (const s of d.steps) for (const a of s.spans) intervals.push([a.start, a.end ?? end]);
    for (const e of d.events) intervals.push([e[2], e[2]]);
    for (const c of d.subRuns) intervals.push([c.start, c.end ?? end]);
    const scale = buildScale(intervals, end);
    const rows = timelineRows(d, end);
    const body = el("div", { class: "tl-body" });
    tl = { rows, scale, end, body, scroll: null, index: new Map(rows.map((r, i) => [r.path, i])) };
    if (rows.length <= TL_ALL) {
      const frag = document.createDocumentFragment();
      for (const r of rows) frag.append(timelineRow(r, scale, end));
      body.append(frag);
    } else { // a long run: only the rows in view exist, like the event table
      body.classList.add("virtual");
      body.style.height = rows.length * TL_ROW_H + "px";
    }
    const axis = el("div", { class: "row axis" }, el("div", { class: "label" }, "time →"),
      el("div", { class: "track" }, scale.segs.map((s) => s[4]
        ? el("div", { class: "gap", style: "left:" + pct(s[2]) + ";width:" + pct(s[3] - s[2]), title: "idle " + fmtDur(s[1] - s[0]) + " (compressed)" }, "≈ " + fmtDur(s[1] - s[0]))
        : el("div", { class: "tick", style: "left:" + pct(s[2]) }, "+" + fmtDur(s[0]))),
        scale.endF < 0.98 ? el("div", { class: "tick end", style: "left:" + pct(scale.endF), title: "the run's end (or now)" }, "+" + fmtDur(end)) : null),
      el("div", { class: "meta" }, fmtDur(end)));
    const starts = d.starts.slice(1).map((t) => el("div", { class: "resume", style: "left:" + pct(scale.x(t)), title: "run resumed" }));
    return el("section", { class: "timeline" }, el("h2", {}, "Timeline ",
      el("small", {}, "one bar per step; ▮ attempt, ↻ retry, hatched = sleep or wait; ≈ compressed idle time")),
      axis, tl.scroll = el("div", { class: "tl-scroll", onscroll: () => requestAnimationFrame(drawTimeline) },
        el("div", { class: "resumes" }, starts), body));
  }
  // Axis labels that would overlap a compressed-gap label, an earlier tick label or the
  // axis's end keep their tick line and lose their text (gap labels are kept: they say
  // how much time is hidden).
  function declutterAxis() {
    const track = document.querySelector(".axis .track");
    if (!track) return;
    const bounds = track.getBoundingClientRect();
    const gaps = [...track.querySelectorAll(".gap")].map((g) => g.getBoundingClientRect());
    let lastRight = -Infinity;
    for (const tick of [...track.querySelectorAll(".tick")].sort((a, b) => a.getBoundingClientRect().left - b.getBoundingClientRect().left)) {
      const r = tick.getBoundingClientRect();
      const hit = r.left < lastRight + 4 || r.right > bounds.right || gaps.some((g) => r.left < g.right && g.left < r.right);
      if (hit) { tick.title = tick.textContent; tick.textContent = ""; tick.classList.add("quiet"); }
      else lastRight = r.right;
    }
  }
  function drawTimeline() {
    if (!tl || tl.rows.length <= TL_ALL) return;
    const first = Math.max(0, Math.floor(tl.scroll.scrollTop / TL_ROW_H) - 20);
    const last = Math.min(tl.rows.length, first + Math.ceil((tl.scroll.clientHeight || 600) / TL_ROW_H) + 40);
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const row = timelineRow(tl.rows[i], tl.scale, tl.end);
      row.style.top = i * TL_ROW_H + "px";
      frag.append(row);
    }
    tl.body.replaceChildren(frag);
  }
  function revealStep(path) { // scroll the timeline so the step's bar is in view
    const i = tl && tl.index.get(path);
    if (i === undefined || !tl.scroll) return;
    const top = i * TL_ROW_H, view = tl.scroll.clientHeight || 600;
    if (top < tl.scroll.scrollTop || top > tl.scroll.scrollTop + view - TL_ROW_H) tl.scroll.scrollTop = Math.max(0, top - view / 3);
    drawTimeline();
  }
  function lastT(d) { return d.events.length ? d.events[d.events.length - 1][2] : 0; }
  function nowT(d) { return Date.now() / 1000 - d.t0; }

  function timelineRow(r, scale, end) {
    const depth = (r.path.match(/\//g) || []).length;
    const label = el("div", { class: "label", style: "padding-left:" + (6 + depth * 12) + "px", title: r.path }, r.path);
    const track = el("div", { class: "track" });
    let meta = "";
    if (r.kind === "step") {
      const s = r.step;
      const a0 = s.spans.length ? s.spans[0].start : 0;
      const a1 = s.spans.length ? Math.max(...s.spans.map((a) => a.end ?? end)) : a0;
      const x0 = scale.x(a0), x1 = scale.x(a1);
      const bar = el("div", {
        class: "bar st-" + s.status, "data-step-path": s.path, "data-status": s.status,
        "data-attempts": s.attempts, style: "left:" + pct(x0) + ";width:" + pct(x1 - x0),
        title: s.path + ": " + s.status + ", " + s.attempts + " attempt" + (s.attempts === 1 ? "" : "s"),
        onclick: () => { setFilter({ step: s.path }); document.querySelector(".events-section").scrollIntoView(); },
      });
      const w = Math.max(x1 - x0, 1e-9);
      s.spans.forEach((a, i) => {
        const ax0 = scale.x(a.start), ax1 = scale.x(a.end ?? end);
        bar.append(el("i", {
          class: "att o-" + a.outcome, "data-attempt": a.attempt, "data-outcome": a.outcome,
          style: "left:" + pct((ax0 - x0) / w) + ";width:" + pct((ax1 - ax0) / w),
          title: "attempt " + a.attempt + ": " + a.outcome + " after " + fmtDur((a.end ?? end) - a.start) + (a.error ? " — " + (a.error.type || "") + ": " + (a.error.message || "") : ""),
        }));
        if (i > 0) bar.append(el("b", { class: "retry", style: "left:" + pct((ax0 - x0) / w), title: "retry: attempt " + a.attempt }, "↻"));
      });
      track.append(bar);
      meta = (s.attempts > 1 ? s.attempts + " attempts · " : "") + fmtDur(a1 - a0);
    } else if (r.kind === "group") {
      const x0 = scale.x(r.start), x1 = scale.x(r.end);
      track.append(el("div", { class: "group", "data-group-path": r.path, style: "left:" + pct(x0) + ";width:" + pct(x1 - x0) }));
      meta = "parallel · " + r.n;
    } else if (r.kind === "idle") {
      const w = r.idle, stop = w.end ?? end;
      const x0 = scale.x(w.start), x1 = scale.x(stop);
      track.append(el("div", {
        class: "idle k-" + w.kind + (w.end === null ? " open" : ""), "data-idle-path": w.stepPath, "data-kind": w.kind,
        style: "left:" + pct(x0) + ";width:" + pct(x1 - x0),
        title: (w.kind === "sleep" ? "sleep until " + (w.wakeAt || "?") : "wait for event " + (w.name || "?")) + (w.end === null ? " (waiting)" : " — " + (w.outcome || "done")),
      }, w.kind === "sleep" ? "sleep" : "wait " + (w.name || "")));
      meta = (w.kind === "sleep" ? "sleep " : "wait ") + fmtDur(stop - w.start) + (w.end === null ? " …" : "");
    } else if (r.kind === "call") {
      const c = r.call, x0 = scale.x(c.start), x1 = scale.x(c.end ?? end);
      track.append(el("a", { class: "call st-" + c.status, href: runHref(c.runId), "data-sub-run": c.runId,
        style: "left:" + pct(x0) + ";width:" + pct(x1 - x0), title: "sub-run " + c.runId }, "↳ " + (c.workflow || "sub-run")));
      meta = "sub-run · " + c.status;
    }
    return el("div", { class: "row r-" + r.kind }, label, track, el("div", { class: "meta" }, meta));
  }

  // ---- event table (virtualized) -------------------------------------------------------
  let evScroll = null, evBody = null, evCount = null, detail = null, typeSelect = null, search = null, stepChip = null;
  let haystack = null;

  function eventsSection(d) {
    const counts = new Map();
    for (const e of d.events) counts.set(e[1], (counts.get(e[1]) || 0) + 1);
    typeSelect = el("select", { "data-filter": "type", "aria-label": "event type", onchange: () => setFilter({ type: typeSelect.value }) },
      el("option", { value: "" }, "all types (" + d.events.length + ")"),
      [...counts.keys()].sort().map((t) => el("option", { value: t }, t + " (" + counts.get(t) + ")")));
    search = el("input", { type: "search", "data-filter": "search", placeholder: "search payloads, steps…", "aria-label": "search",
      oninput: () => setFilter({ q: search.value }) });
    stepChip = el("span", { class: "chip", hidden: true });
    evCount = el("span", { class: "count", "data-event-count": "" });
    evBody = el("tbody");
    evScroll = el("div", { class: "ev-scroll", onscroll: () => requestAnimationFrame(drawRows) },
      el("table", { class: "events" },
        el("thead", {}, el("tr", {}, el("th", { class: "c-seq" }, "seq"), el("th", { class: "c-type" }, "type"),
          el("th", { class: "c-t" }, "time"), el("th", { class: "c-path" }, "step"), el("th", {}, "payload"))),
        evBody));
    detail = el("pre", { class: "detail", hidden: true });
    return el("section", { class: "events-section" }, el("h2", {}, "Events"),
      el("div", { class: "filters" }, typeSelect, search, stepChip, evCount), evScroll, detail);
  }

  function applyFilter() {
    const q = state.q.toLowerCase();
    if (q && !haystack) haystack = state.events.map((e) => (e[1] + " " + e[3] + " " + e[4]).toLowerCase());
    const out = [];
    for (let i = 0; i < state.events.length; i++) {
      const e = state.events[i];
      if (state.type && e[1] !== state.type) continue;
      if (state.step && e[3] !== state.step) continue;
      if (q && haystack[i].indexOf(q) < 0) continue;
      out.push(i);
    }
    state.filtered = out;
    typeSelect.value = state.type;
    if (typeSelect.value !== state.type) { // a type this run has no event of
      typeSelect.append(el("option", { value: state.type }, state.type + " (0)")); typeSelect.value = state.type;
    }
    if (search.value !== state.q) search.value = state.q;
    stepChip.hidden = !state.step;
    stepChip.replaceChildren("step: " + state.step + " ", el("button", { onclick: () => setFilter({ step: "" }), title: "clear" }, "×"));
    evCount.textContent = out.length === state.events.length ? out.length + " events" : out.length + " of " + state.events.length + " events";
    evScroll.scrollTop = Math.min(evScroll.scrollTop, Math.max(0, out.length * ROW_H - evScroll.clientHeight));
    drawRows();
  }

  function drawRows() {
    const rows = state.filtered || [];
    const view = evScroll.clientHeight || 480;
    const first = Math.max(0, Math.floor(evScroll.scrollTop / ROW_H) - 10);
    const last = Math.min(rows.length, first + Math.ceil(view / ROW_H) + 20);
    const frag = document.createDocumentFragment();
    frag.append(spacer(first * ROW_H));
    for (let k = first; k < last; k++) {
      const e = state.events[rows[k]];
      frag.append(el("tr", {
        "data-event-seq": e[0], "data-event-type": e[1], class: "t-" + e[1].replace(/\./g, "-") + (state.selected === e[0] ? " sel" : ""),
        onclick: () => { state.selected = e[0]; detail.hidden = false; detail.textContent = "#" + e[0] + " " + e[1] + "\n" + pretty(e[4]); drawRows(); },
      }, el("td", { class: "c-seq" }, e[0]), el("td", { class: "c-type" }, e[1]), el("td", { class: "c-t" }, "+" + fmtDur(e[2])),
        el("td", { class: "c-path" }, e[3]), el("td", { class: "c-payload", title: e[4].length > 200 ? null : e[4] }, e[4])));
    }
    frag.append(spacer((rows.length - last) * ROW_H));
    evBody.replaceChildren(frag);
  }

  function spacer(px) { return el("tr", { class: "spacer" }, el("td", { colspan: 5, style: "height:" + px + "px" })); }

  function setFilter(change) {
    Object.assign(state, change);
    const p = new URLSearchParams();
    if (state.type) p.set("type", state.type);
    if (state.q) p.set("q", state.q);
    if (state.step) p.set("step", state.step);
    setHash(p);
    applyFilter();
    if (change.step) revealStep(change.step);
  }
  function readHash() {
    const p = hashParams();
    state.type = p.get("type") || ""; state.q = p.get("q") || ""; state.step = p.get("step") || "";
  }

  function renderRun(d) {
    const keepTl = document.querySelector(".tl-scroll")?.scrollTop || 0;
    const keepEv = evScroll ? evScroll.scrollTop : 0;
    state.events = d.events; haystack = null;
    app.replaceChildren(header(d), timeline(d), eventsSection(d));
    declutterAxis();
    document.querySelector(".tl-scroll").scrollTop = keepTl;
    evScroll.scrollTop = keepEv;
    readHash();
    applyFilter();
    drawTimeline();
    if (state.step) revealStep(state.step);
  }

  // ---- runs list (little ui) -------------------------------------------------------
  let statusFilter = "";
  function renderRuns(d) {
    statusFilter = hashParams().get("status") || "";
    const runs = d.runs;
    const statuses = [...new Set(runs.map((r) => r.status))].sort();
    if (statusFilter && !statuses.includes(statusFilter)) statuses.push(statusFilter);
    const select = el("select", { "data-filter": "status", "aria-label": "status", onchange: () => {
      const p = new URLSearchParams(); if (select.value) p.set("status", select.value); setHash(p); renderRuns(d);
    } }, el("option", { value: "" }, "all statuses (" + runs.length + ")"),
    statuses.map((s) => el("option", { value: s }, s + " (" + runs.filter((r) => r.status === s).length + ")")));
    select.value = statusFilter;
    const shown = runs.filter((r) => !statusFilter || r.status === statusFilter);
    const body = el("tbody", {}, shown.map((r) => el("tr", { "data-run-id": r.runId, "data-status": r.status },
      el("td", {}, el("a", { href: runHref(r.runId) }, r.runId)), el("td", {}, badge(r.status)),
      el("td", {}, r.workflowId || "–"), el("td", {}, fmtTime(r.startedAt)),
      el("td", {}, runDuration(r)), el("td", {}, String(r.steps)),
      r.thread
        // A LangGraph thread is no run: it holds checkpoints, and never waits.
        ? el("td", { class: "thread", "data-thread-id": r.thread.threadId }, "thread " + r.thread.threadId + ": " +
            r.thread.checkpoints + (r.thread.checkpoints === 1 ? " checkpoint" : " checkpoints") +
            (r.thread.lastNode ? ", last node " + r.thread.lastNode : ""))
        : el("td", { class: "waiting" }, r.waitingFor || (r.error ? "error: " + r.error : "")))));
    const approvals = CONFIG.actions && (d.approvals || []).length ? el("div", { class: "actions", "data-actions": "" },
      approvalsList(d.approvals, true), field("reason", { placeholder: "reason for a denial (optional)" }),
      el("span", { "data-action-result": "" }),
      uiToken() ? null : el("small", { class: "notoken" }, "to act, open the URL little ui printed (it carries ?token=…)")) : null;
    app.replaceChildren(el("header", {}, el("div", { class: "top" }, el("h1", {}, "little-workflow runs"),
      el("small", {}, d.dataDir || ""), CONFIG.liveUrl ? el("span", { class: "live" }, "● live") : null)), approvals,
    el("section", {}, el("div", { class: "filters" }, select, el("span", { class: "count" }, shown.length + " runs")),
      el("table", { class: "runs" }, el("thead", {}, el("tr", {}, ["run id", "status", "workflow", "started", "duration", "steps", "waiting for / error"].map((h) => el("th", {}, h)))), body),
      // One catalogue page at a time (?status=…&workflow=…&cursor=…): the next one is a link.
      d.nextPage ? el("p", {}, el("a", { href: d.nextPage, "data-next-page": "1" }, "next page →")) : null));
    showAnswer();
  }

  // ---- start, and live updates -----------------------------------------------------
  const render = document.body.dataset.page === "runs" ? renderRuns : renderRun;
  let current = DATA;
  render(current);
  window.addEventListener("hashchange", () => render(current));
  let busy = false;
  async function poll() {
    if (busy || !CONFIG.liveUrl) return;
    busy = true;
    try {
      const since = current.lastSequence ?? "";
      const resp = await fetch(CONFIG.liveUrl + (CONFIG.liveUrl.includes("?") ? "&" : "?") + "since=" + since, { cache: "no-store" });
      if (resp.ok) {
        const fresh = await resp.json();
        if (fresh.changed !== false) { current = fresh.data; render(current); }
      }
    } catch (e) { /* server gone: keep the last picture */ } finally { busy = false; }
  }
  // After an action: show its effect now, not at the next tick.
  function refreshNow() { setTimeout(poll, 50); }
  if (CONFIG.liveUrl) {
    const timer = setInterval(() => {
      if (current.finished) { clearInterval(timer); document.querySelector(".live")?.remove(); return; }
      poll();
    }, 1000);
  }
  // Milliseconds from navigation start until the first picture's DOM is built.
  document.body.dataset.renderMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "1";
  // ... and until the frame after it was laid out and painted.
  requestAnimationFrame(() => requestAnimationFrame(() => {
    document.body.dataset.paintMs = String(Math.round(performance.now()));
  }));
})();
