"use strict";
// citerag web page. Every server-derived string goes through textContent /
// Text nodes (el() below); no innerHTML anywhere. CSP-safe: no inline styles.
(() => {
  const $ = (id) => document.getElementById(id);
  const STORE = "citerag.collection";
  let collection = null;
  let keysRequired = false;

  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") n.className = v;
      else n.setAttribute(k, String(v));
    }
    for (const k of kids) if (k !== null && k !== undefined && k !== false) n.append(k);
    return n;
  }

  // Only same-origin links (blocks javascript:, data:, other hosts).
  function safeHref(h) {
    try { return h && new URL(h, location.href).origin === location.origin ? h : null; } catch (e) { return null; }
  }

  const fmt = (x) => (typeof x === "number" && isFinite(x) ? x.toFixed(3) : "—");
  const plural = (n, w) => `${n} ${w}${n === 1 ? "" : "s"}`;
  const colPath = () => `/v1/collections/${encodeURIComponent(collection)}`;

  function showError(msg) {
    $("alert").textContent = msg || "";
    $("alert").hidden = !msg;
  }

  function reportError(e) {
    if (e && e.status === 401) return; // key form already shown
    showError((e && e.message) || String(e));
  }

  async function api(path, opts = {}) {
    const init = { method: opts.method || "GET", credentials: "same-origin", headers: { Accept: "application/json" } };
    if (opts.json !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.json);
    }
    const res = await fetch(path, init);
    let data = null;
    if ((res.headers.get("content-type") || "").includes("json")) data = await res.json().catch(() => null);
    if (!res.ok) {
      const err = new Error((data && data.error) || `Request failed (HTTP ${res.status}).`);
      err.status = res.status;
      if (res.status === 401 && !opts.no401) showKeyForm(err.message);
      throw err;
    }
    return data;
  }

  // ---- session / API key -------------------------------------------------
  function showKeyForm(msg) {
    keysRequired = true;
    $("app").hidden = true;
    $("sign-out").hidden = true;
    $("who").hidden = true;
    $("key-form").hidden = false;
    $("key-error").textContent = msg || "";
    $("key").focus();
  }

  function showApp() {
    $("key-form").hidden = true;
    $("app").hidden = false;
    $("sign-out").hidden = !keysRequired;
    loadCollections();
  }

  async function signIn(ev) {
    ev.preventDefault();
    const key = $("key").value.trim();
    if (!key) return;
    $("key-submit").disabled = true;
    try {
      await api("/v1/session", { method: "POST", json: { key }, no401: true });
      $("key").value = "";
      $("key-error").textContent = "";
      showError("");
      showApp();
    } catch (e) {
      $("key-error").textContent = e.message;
      $("key").focus();
    } finally {
      $("key-submit").disabled = false;
    }
  }

  async function signOut() {
    try { await api("/v1/session", { method: "DELETE", no401: true }); } catch (e) { reportError(e); }
    showKeyForm();
  }

  // ---- collections -------------------------------------------------------
  async function loadCollections() {
    let list;
    try { list = (await api("/v1/collections")).collections || []; } catch (e) { return reportError(e); }
    const names = list.map((c) => c.name);
    if (!names.length) names.push("default");
    let saved = null;
    try { saved = localStorage.getItem(STORE); } catch (e) { /* storage disabled */ }
    const pick = [collection, saved, "default"].find((n) => names.includes(n)) || names[0];
    const sel = $("collection");
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    sel.value = collection = pick;
    chat.opened();
    loadDocuments();
  }

  function changeCollection() {
    collection = $("collection").value;
    try { localStorage.setItem(STORE, collection); } catch (e) { /* storage disabled */ }
    chat.opened();
    $("upload-list").replaceChildren();
    $("upload-status").textContent = "";
    loadDocuments();
  }

  // ---- ask ---------------------------------------------------------------
  function locatorText(c) {
    const l = c.locator || {};
    // For text the label is the section, which has its own column: show the character range instead.
    if (l.type === "char") return `characters ${l.start}–${l.end}`;
    if (c.locator_label) return c.locator_label;
    if (l.type === "page") return `page ${l.page}`;
    if (l.type === "time") return `${l.start}–${l.end} s`;
    if (l.type === "cell") return `${l.sheet}!${l.range}`;
    if (l.type === "char") return `characters ${l.start}–${l.end}`;
    return "";
  }

  // Marker offsets are in code points; fall back to scanning for [n].
  function markersOf(a) {
    if (Array.isArray(a.markers)) {
      return a.markers.filter((m) => Number.isInteger(m.start) && Number.isInteger(m.end)).sort((x, y) => x.start - y.start);
    }
    const s = a.answer || "";
    return Array.from(s.matchAll(/\[(\d+)\]/g), (m) => {
      const start = Array.from(s.slice(0, m.index)).length;
      return { index: Number(m[1]), start, end: start + m[0].length };
    });
  }

  async function ask(ev) {
    ev.preventDefault();
    const question = $("question").value.trim();
    if (!question) return;
    if (!collection) return showError("No collection is selected.");
    const btn = $("ask");
    btn.disabled = true;
    $("ask-status").textContent = "Searching…";
    showError("");
    try {
      $("question").value = "";
      await chat.ask(question);
    } catch (e) {
      $("question").value = question;
      reportError(e);
    } finally {
      btn.disabled = false;
      $("ask-status").textContent = "";
    }
  }

  // ---- documents ---------------------------------------------------------
  const settled = (d) => d.status !== "pending" && !d.job;

  function docStateText(d) {
    if (d.status === "failed") return `failed: ${d.error || "unknown error"}`;
    if (d.status !== "indexed" || d.job) return "pending…";
    let s = typeof d.chunk_count === "number" ? `indexed · ${plural(d.chunk_count, "chunk")}` : "indexed";
    if (d.error) s += ` (newer version failed: ${d.error})`;
    return s;
  }

  function docRow(d) {
    const href = safeHref(d.file_href);
    const actions = el("td", { class: "actions" });
    if (d.status === "failed" || (d.status === "indexed" && d.error)) {
      const retry = el("button", { type: "button", "aria-label": `Retry ${d.name}` }, "Retry");
      retry.addEventListener("click", () => retryDoc(d));
      actions.append(retry);
    }
    const del = el("button", { type: "button", class: "danger", "aria-label": `Delete ${d.name}` }, "Delete");
    del.addEventListener("click", () => deleteDoc(d));
    actions.append(del);
    const reason = el("td", { class: "reason" }, d.error ? (d.status === "indexed" ? `Newer version failed: ${d.error}` : d.error) : "");
    const warnings = (Array.isArray(d.warnings) ? d.warnings : []).map((w) => (typeof w === "string" ? w : JSON.stringify(w)));
    if (warnings.length) reason.append(el("div", { class: "warn" }, `Warnings: ${warnings.join("; ")}`));
    return el("tr", { id: `doc-${d.id}`, class: `status-${d.status}` },
      el("td", {}, href ? el("a", { href }, d.name) : d.name || ""),
      el("td", {}, d.title || ""),
      el("td", { class: "status" }, d.job ? `${d.status} (${d.job})` : d.status || ""),
      el("td", { class: "num" }, d.chunk_count === null || d.chunk_count === undefined ? "" : String(d.chunk_count)),
      reason,
      actions);
  }

  function updateDocRow(d) {
    const old = document.getElementById(`doc-${d.id}`);
    if (old) old.replaceWith(docRow(d));
  }

  async function loadDocuments() {
    const c = collection;
    if (!c) return null;
    let docs;
    try { docs = (await api(`${colPath()}/documents`)).documents || []; } catch (e) { reportError(e); return null; }
    if (c !== collection) return null;
    const tbody = $("documents").tBodies[0];
    tbody.replaceChildren(...docs.map(docRow));
    if (!docs.length) tbody.append(el("tr", {}, el("td", { colspan: 6, class: "empty" }, "No documents in this collection yet.")));
    filterChoices(docs);
    loadSources();
    return docs;
  }

  // ---- filters: the choices the collection's documents offer (the server applies them inside its indexes) ----
  function filterChoices(docs) {
    const indexed = docs.filter((d) => d.status === "indexed");
    const offer = (id, values) => {
      const sel = $(id);
      const kept = sel.value;
      const sorted = [...new Set(values.filter(Boolean))].sort();
      sel.replaceChildren(el("option", { value: "" }, "any"), ...sorted.map((v) => el("option", { value: v }, v)));
      sel.value = sorted.includes(kept) ? kept : "";
    };
    offer("filter-type", indexed.map((d) => (d.stamps || {}).extractor));
    offer("filter-source", indexed.map((d) => (d.source ? d.source.name : "upload")));
    offer("filter-tag", indexed.flatMap((d) => d.tags || []));
  }

  // ---- sources (admins only: a 403 hides the section) ---------------------
  function sourceState(s) {
    if (s.last_error) return `failed ${s.failures}× in a row: ${s.last_error}`;
    if (!s.last_success) return "never synced";
    const l = s.last || {};
    return `${s.last_success} · ${l.added || 0} added, ${l.changed || 0} changed, ${l.removed || 0} removed`;
  }

  function sourceRow(s) {
    const sync = el("button", { type: "button", "aria-label": `Sync ${s.name} now` }, "Sync now");
    sync.addEventListener("click", async () => {
      sync.disabled = true;
      const path = `${colPath()}/sources/${encodeURIComponent(s.name)}`;
      try { await api(`${path}/sync`, { method: "POST" }); } catch (e) { return reportError(e); }
      // Queued: the table is read again once the sync ended (a success or a failure recorded; at most 60 s).
      for (let i = 0; i < 60; i++) {
        await new Promise((done) => setTimeout(done, 1000));
        let now = null;
        try { now = await api(path); } catch (e) { break; }
        if (now.last_success !== s.last_success || now.failures !== s.failures) break;
      }
      loadSources();
    });
    return el("tr", { id: `source-${s.name}`, class: s.last_error ? "status-failed" : "" },
      el("td", {}, s.name), el("td", {}, s.kind), el("td", { class: "reason" }, s.location),
      el("td", { class: "num" }, String(s.documents || 0)), el("td", { class: "reason" }, sourceState(s)),
      el("td", {}, s.next_run || "when asked"), el("td", { class: "actions" }, sync));
  }

  async function loadSources() {
    const c = collection;
    if (!c) return;
    let found = [];
    try {
      const s = await api("/v1/session");
      if (s.scope === "admin" && (!s.collection || s.collection === c)) {
        found = (await api(`${colPath()}/sources`)).sources || [];
      }
    } catch (e) { found = []; }
    if (c !== collection) return;
    $("sources-section").hidden = !found.length;
    $("sources").tBodies[0].replaceChildren(...found.map(sourceRow));
  }

  // Server-sent status events for the given ids; onDone(true) on "done".
  function watch(ids, onStatus, onDone) {
    const es = new EventSource(`${colPath()}/documents/events?ids=${encodeURIComponent(ids.join(","))}`);
    es.addEventListener("status", (ev) => {
      let doc = null;
      try { doc = JSON.parse(ev.data); } catch (e) { return; }
      if (doc && doc.id !== undefined) onStatus(doc);
    });
    es.addEventListener("done", () => { es.close(); onDone(true); });
    es.onerror = () => { es.close(); onDone(false); };
  }

  async function retryDoc(d) {
    showError("");
    try {
      const doc = await api(`${colPath()}/documents/${encodeURIComponent(d.id)}/retry`, { method: "POST" });
      if (doc) updateDocRow(doc);
      watch([d.id], updateDocRow, () => loadDocuments());
    } catch (e) {
      reportError(e);
    }
  }

  async function deleteDoc(d) {
    if (!window.confirm(`Delete "${d.name}" from collection "${collection}"?`)) return;
    showError("");
    try { await api(`${colPath()}/documents/${encodeURIComponent(d.id)}`, { method: "DELETE" }); } catch (e) { reportError(e); }
    loadDocuments();
  }

  // ---- upload ------------------------------------------------------------
  function trackUploads(items) {
    const list = $("upload-list");
    const status = $("upload-status");
    const rows = new Map(); // id -> [{state, existed, doc}]
    const setState = (entry, doc) => {
      entry.doc = doc;
      entry.state.textContent = (entry.existed ? "already in the collection · " : "") + docStateText(doc);
      entry.state.className = `state status-${settled(doc) ? doc.status : "pending"}`;
    };
    const summary = () => {
      const docs = Array.from(rows.values(), (es) => es[0].doc);
      const done = docs.filter(settled);
      const failed = done.filter((d) => d.status === "failed").length;
      status.textContent = done.length === docs.length
        ? `Done: ${done.length - failed} indexed, ${failed} failed.`
        : `Indexing… ${done.length} of ${plural(docs.length, "file")} settled.`;
    };
    list.replaceChildren();
    for (const it of items) {
      const entry = { state: el("span", { class: "state" }), existed: !!it.existed };
      list.append(el("li", {}, el("span", { class: "name" }, it.name || `document ${it.id}`), " — ", entry.state));
      if (!rows.has(it.id)) rows.set(it.id, []);
      rows.get(it.id).push(entry);
      setState(entry, it);
    }
    summary();
    const ids = Array.from(rows.keys()).filter((id) => id !== null && id !== undefined);
    loadDocuments();
    if (!ids.length) return;
    watch(ids, (doc) => {
      (rows.get(doc.id) || []).forEach((e) => setState(e, doc));
      updateDocRow(doc);
      summary();
    }, async (ok) => {
      const docs = await loadDocuments();
      (docs || []).forEach((d) => (rows.get(d.id) || []).forEach((e) => setState(e, d)));
      summary();
      if (!ok && Array.from(rows.values()).some((es) => !settled(es[0].doc))) {
        status.textContent = "Lost the live status stream; use Refresh to see the latest status.";
      }
    });
  }

  function upload(ev) {
    ev.preventDefault();
    const files = Array.from($("files").files || []);
    if (!files.length) { showError("Choose one or more files to upload."); $("files").focus(); return; }
    showError("");
    const fd = new FormData();
    files.forEach((f) => fd.append("files", f, f.name));
    const xhr = new XMLHttpRequest();
    const bar = $("upload-progress");
    const btn = $("upload");
    const status = $("upload-status");
    const fail = (msg) => { btn.disabled = false; bar.value = 0; status.textContent = "Upload failed."; showError(msg); };
    xhr.open("POST", `${colPath()}/documents`);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = (e) => { if (e.lengthComputable && e.total > 0) bar.value = (e.loaded / e.total) * 100; };
    xhr.onload = () => {
      let data = null;
      try { data = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      const msg = (data && data.error) || `Upload failed (HTTP ${xhr.status}).`;
      if (xhr.status === 401) {
        fail("");
        showKeyForm(msg);
      } else if (xhr.status < 200 || xhr.status >= 300) {
        fail(msg);
      } else {
        btn.disabled = false;
        bar.value = 100;
        $("files").value = "";
        trackUploads((data && data.documents) || []);
      }
    };
    xhr.onerror = () => fail("Upload failed: the server could not be reached.");
    btn.disabled = true;
    bar.value = 0;
    status.textContent = `Uploading ${plural(files.length, "file")}…`;
    $("upload-list").replaceChildren();
    xhr.send(fd);
  }

  // ---- wiring ------------------------------------------------------------
  const chat = window.CiteragChat({
    $, el, api, safeHref, colPath, showError, reportError, showKeyForm, locatorText, markersOf, fmt,
  });

  async function init() {
    $("key-form").addEventListener("submit", signIn);
    $("sign-out").addEventListener("click", signOut);
    $("collection").addEventListener("change", changeCollection);
    $("ask-form").addEventListener("submit", ask);
    $("question").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        if (!$("ask").disabled) $("ask").click();
      }
    });
    $("upload-form").addEventListener("submit", upload);
    $("refresh").addEventListener("click", () => { showError(""); loadDocuments(); });
    let s = { keys_required: false, authenticated: true };
    try { s = (await api("/v1/session")) || s; } catch (e) { if (e.status === 401) return; /* key form is showing */ }
    keysRequired = !!s.keys_required;
    $("oidc").hidden = !s.oidc;
    if (s.user) {  // a signed-in user: whose groups decide the documents shown
      $("who").textContent = `Signed in as ${s.user}` + (s.groups && s.groups.length ? ` (${s.groups.join(", ")})` : "");
      $("who").hidden = false;
    }
    if (keysRequired && !s.authenticated) showKeyForm();
    else showApp();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
