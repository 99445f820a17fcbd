// The explorer of one run's page: a DataTables table over window.LB_SAMPLES (samples.js), select
// filters on the text columns, a score range, and a detail view whose data chunk (detail-K.js) is
// loaded with a script tag when a sample is opened (fetch() is refused on file:// URLs), with the
// site's shared texts it names (shared/XX.js). The encodings are engine/leaderboard/site.py's (run_data).
(function () {
  "use strict";
  const data = window.LB_SAMPLES;
  // Columns to rows: a text column is its distinct values and one code per row (-1: none).
  const cols = data.cols.map((c) => (Array.isArray(c) ? c : c.i.map((i) => (i < 0 ? null : c.v[i]))));
  data.rows = Array.from({ length: data.n }, (_, r) => cols.map((c) => c[r]));
  const DataTable = window.LBTables.default;  // the bundle's default export
  const columns = data.columns.map((c) => c.key);
  const scoreColumns = data.columns.filter((c) => c.type === "num");

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    children.flat().forEach((c) => node.append(c instanceof Node ? c : document.createTextNode(c == null ? "–" : String(c))));
    return node;
  }
  const num = (v, d = 3) => (v == null ? "–" : typeof v === "number" && !Number.isInteger(v) ? v.toFixed(d) : String(v));

  // Each column's type is given rather than detected: DataTables' detection renders every cell of
  // every column (8,032 rows: a third of the time to the first table). A text column sorts as
  // DataTables' detection would have it, by locale when one of its values is not ASCII.
  const nonAscii = (c) => !Array.isArray(c) && c.v.some((v) => /[^\x00-\x7f]/.test(String(v)));
  const table = new DataTable("#samples", {
    data: data.rows,
    columns: data.columns.map((c, i) => ({
      title: c.title,
      className: c.type === "text" ? "" : "dt-right",
      type: c.type !== "text" ? "num" : nonAscii(data.cols[i]) ? "string-utf8" : "string",
      // Sorting puts missing numbers last-but-sortable; display shows scores with 3 decimals.
      render: c.type === "text" ? (v) => (v == null ? "" : v)
        : (v, type) => (type === "display" ? (v == null ? "–" : c.type === "num" ? v.toFixed(3) : String(v)) : v == null ? -Infinity : v),
    })),
    deferRender: true,
    pageLength: 25,
    order: [],
  });

  const filters = document.getElementById("filters");
  data.filters.forEach((key) => {
    const index = columns.indexOf(key);
    const values = [...new Set(data.rows.map((r) => r[index]).filter((v) => v != null && v !== ""))].sort();
    const title = data.columns[index].title;
    const select = el("select", { "data-filter": key, "aria-label": title }, el("option", { value: "" }, `${title}: all`),
      ...values.map((v) => el("option", { value: v }, v)));
    select.addEventListener("change", () => {
      const value = select.value;
      table.column(index).search(value ? "^" + DataTable.util.escapeRegex(value) + "$" : "", true, false).draw();
    });
    filters.append(el("label", {}, select));
  });
  if (scoreColumns.length) {
    const which = el("select", { "data-filter": "score-column", "aria-label": "score column" },
      ...scoreColumns.map((c) => el("option", { value: String(columns.indexOf(c.key)) }, c.title)));
    const low = el("input", { type: "number", step: "any", placeholder: "min", "data-filter": "score-min" });
    const high = el("input", { type: "number", step: "any", placeholder: "max", "data-filter": "score-max" });
    DataTable.ext.search.push((settings, row, index) => {
      const lo = parseFloat(low.value), hi = parseFloat(high.value);
      if (isNaN(lo) && isNaN(hi)) return true;
      const v = data.rows[index][Number(which.value)];
      return v != null && (isNaN(lo) || v >= lo) && (isNaN(hi) || v <= hi);
    });
    [which, low, high].forEach((input) => input.addEventListener("input", () => table.draw()));
    filters.append(el("span", { class: "range" }, "score range ", which, " ", low, " – ", high));
  }

  function script(src, ready) {
    return new Promise((resolve, reject) => {
      const tag = el("script", { src });
      tag.onload = () => resolve(ready());
      tag.onerror = () => reject(new Error(`${src} could not be loaded`));
      document.body.append(tag);
    });
  }
  const loaded = {};
  function chunk(k) {
    if (!loaded[k]) loaded[k] = script(`detail-${k}.js`, () => window.LB_DETAIL[k]);
    return loaded[k];
  }
  const sharedLoaded = {};
  function shared(prefix) {
    if (!sharedLoaded[prefix]) sharedLoaded[prefix] = script(`../../shared/${prefix}.js`, () => window.LB_SHARED[prefix]);
    return sharedLoaded[prefix];
  }

  // A detail from its chunk: each section is the chunk's template (t) with its value; texts are
  // indices into the chunk's strings (s), a shared text the digest of a text in shared/.
  const TEXT_KINDS = new Set(["text", "computation", "note"]);
  async function decode(part, flat) {
    const sections = [];
    for (let j = 0; j < flat.length; j += 2) {
      const s = Object.assign({}, part.t[flat[j]]);
      const v = flat[j + 1];
      if (TEXT_KINDS.has(s.kind)) {
        s.text = part.s[v];
        if (s.shared && s.text != null) s.text = (await shared(s.text.slice(0, 2)))[s.text];
      } else if (s.kind === "kv") {
        s.items = s.keys.map((k, i) => [k, v[i]]);
      } else if (s.kind === "dialogue") {
        s.messages = [];
        for (let i = 0; i < v.length; i += 2) s.messages.push({ role: part.s[v[i]], content: part.s[v[i + 1]] });
      } else {
        s.rows = v;
      }
      sections.push(s);
    }
    return sections;
  }

  // One renderer for every benchmark: a detail is a list of typed sections (engine/leaderboard/details.py).
  const value = (v) => (typeof v === "number" ? num(v, 4) : v !== null && typeof v === "object" ? JSON.stringify(v) : v);

  // A recorded message usually starts with its speaker's name ("Name: ..."): that name is set
  // in bold rather than printed a second time; a message without it gets the role in front.
  function message(m) {
    const named = typeof m.content === "string" && [":", "\uff1a"].some((colon) => m.content.startsWith(m.role + colon));
    if (named) return el("li", {}, el("strong", {}, m.role), m.content.slice(m.role.length));
    return el("li", {}, el("strong", {}, m.role), ": ", m.content);
  }

  const kinds = {
    kv: (s) => el("table", { class: "kv" }, ...s.items.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, value(v))))),
    text: (s) => (s.text == null ? el("p", { class: "empty" }, s.empty) : el("pre", s.scored ? { class: "scored" } : {}, s.text)),
    table: (s) => el("table", { class: "cells" }, el("tr", {}, ...s.columns.map((c) => el("th", {}, c))),
      ...s.rows.map((r) => el("tr", {}, ...r.map((v) => el("td", {}, value(v)))))),
    dialogue: (s) => el("ol", { class: "dialogue" }, ...s.messages.map(message)),
    computation: (s) => el("p", { class: "computation" }, s.text),
    note: (s) => el("p", { class: s.failure ? "failure" : "empty" }, s.text),
  };

  function section(s) {
    const draw = kinds[s.kind];
    const body = draw ? draw(s) : el("p", { class: "failure" }, `a section of unknown kind ${JSON.stringify(s.kind)}`);
    return el("section", { "data-kind": String(s.kind) }, el("h3", {}, s.title), body);
  }

  const detail = document.getElementById("detail");
  document.querySelector("#samples tbody").addEventListener("click", (event) => {
    const tr = event.target.closest("tr");
    if (!tr) return;
    const index = table.row(tr).index();
    if (index == null) return;
    chunk(Math.floor(index / data.chunk)).then((part) => decode(part, part.d[index % data.chunk])).then((d) => {
      const row = data.rows[index];
      const title = el("h2", {}, "Sample: " + data.columns.map((c, i) => [c, row[i]])
        .filter(([c, v]) => c.type !== "num" && v != null && v !== "").map(([c, v]) => `${c.title} ${v}`).join(" · "));
      const close = el("button", { type: "button", class: "close" }, "close");
      close.addEventListener("click", () => { detail.hidden = true; });
      detail.replaceChildren(close, title, ...d.map(section));
      detail.hidden = false;
      detail.scrollIntoView();
    }).catch((error) => {
      detail.replaceChildren(el("p", { class: "failure" }, error.message));
      detail.hidden = false;
    });
  });
})();
