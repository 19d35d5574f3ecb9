'use strict';
// Helpers shared by the demo and management pages.
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') e.textContent = v;
    else if (k === 'class') e.className = v;
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) e.append(c);
  return e;
}

// The configuration fields of each algorithm, in the policy JSON form.
const ALGORITHMS = {
  tokenbucket: {title: 'token bucket', fields: [
    {key: 'rate', label: 'rate /s', def: '5'}, {key: 'burst', label: 'burst', def: '10'},
    {key: 'period', label: 'or refill period', def: '', duration: true, hint: 'e.g. 1s'},
    {key: 'per_period', label: 'tokens per period', def: ''}]},
  fixedwindow: {title: 'fixed window', fields: [
    {key: 'limit', label: 'limit', def: '10'}, {key: 'window', label: 'window', def: '1s', duration: true}]},
  slidingwindow: {title: 'sliding window', fields: [
    {key: 'limit', label: 'limit', def: '10'}, {key: 'window', label: 'window', def: '1s', duration: true},
    {key: 'segments', label: 'segments (0: weighted)', def: '0'}]},
  slidinglog: {title: 'sliding log', fields: [
    {key: 'limit', label: 'limit', def: '10'}, {key: 'window', label: 'window', def: '1s', duration: true}]},
  concurrency: {title: 'concurrency', fields: [{key: 'limit', label: 'limit', def: '5'}]},
};

// An algorithm the table above does not describe (a calendar quota) is
// offered from its descriptor (DESCRIPTORS, /algorithms.js): its fields by
// kind, a text with choices as a list whose first entry leaves it out.
for (const d of (typeof DESCRIPTORS === 'undefined' ? [] : DESCRIPTORS)) {
  if (ALGORITHMS[d.name]) continue;
  ALGORITHMS[d.name] = {title: d.name, fields: d.fields.filter(f => f.kind !== 'queue').map(f => ({
    key: f.name, label: f.name.replace(/_/g, ' '), def: {count: '10', duration: '1s', rate: '5'}[f.kind] || '',
    duration: f.kind === 'duration', text: f.kind === 'text', choices: f.choices}))};
}

// fieldInput is the input of field f: a list of its choices, or a text
// box; attrs are its attributes, value its value.
function fieldInput(f, attrs, value) {
  if (!f.choices) return el('input', {...attrs, type: 'text', value});
  const {size, placeholder, ...rest} = attrs; // a list's size is its rows
  const sel = el('select', rest, el('option', {value: '', text: '-'}), ...f.choices.map(c => el('option', {value: c, text: c})));
  sel.value = value;
  return sel;
}

// Each algorithm's colour, as in the bench report (bench/report.go's
// colours; a bench test holds the two equal).
const COLOURS = {tokenbucket: '#1f77b4', 'tokenbucket-interval': '#17becf', fixedwindow: '#d62728',
  'slidingwindow-segmented': '#ff7f0e', 'slidingwindow-weighted': '#8c564b', slidinglog: '#2ca02c', concurrency: '#9467bd',
  quota: '#393b79'};

// fieldValue turns an input's text into its JSON value: numbers for numeric
// fields (text that is not a number is sent as it is, for the server to
// refuse by name), strings for durations and texts, undefined when empty.
function fieldValue(f, text) {
  text = text.trim();
  if (text === '') return undefined;
  if (f.duration || f.text) return text;
  return /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text) ? Number(text) : text;
}

// clearErrors clears the error spans under root and the fields marked
// invalid.
function clearErrors(root) {
  for (const s of $$('.err', root)) s.textContent = '';
  for (const i of $$('[aria-invalid]', root)) i.removeAttribute('aria-invalid');
}

// showError writes err (the {"error", "field"} JSON of the server) beside
// its field, which it marks invalid (outlined in red), or in fallback, and
// returns the element that shows it. The field is looked for under each of
// roots in turn (an element, or a list of them: the part of the page the
// action came from first, when two parts have a field of the same name).
function showError(roots, err, fallback) {
  roots = Array.isArray(roots) ? roots : [roots];
  // "apps[2]" is shown beside "apps", "a.tokenbucket.queue.limit" beside
  // the nearest field the form has.
  let field = err.field || '';
  let span = null, root = null;
  while (field) {
    root = roots.find(r => $(`[data-err-for="${CSS.escape(field)}"]`, r));
    if (root) { span = $(`[data-err-for="${CSS.escape(field)}"]`, root); break; }
    const up = field.replace(/\[\d+\]$/, '').replace(/\.[^.]*$/, '');
    if (up === field) break;
    field = field.endsWith(']') ? field.replace(/\[\d+\]$/, '') : up;
  }
  if (!span) {
    fallback.textContent = err.error || String(err);
    return fallback;
  }
  span.textContent = err.error;
  const input = $(`[data-field="${CSS.escape(field)}"]`, root);
  if (input) { input.setAttribute('aria-invalid', 'true'); input.focus(); }
  return span;
}

async function readError(res) {
  try { return await res.json(); } catch { return {error: `${res.status} ${res.statusText}`}; }
}
