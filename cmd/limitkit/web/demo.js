'use strict';
// The demo page: builds limiter specs from the form, posts runs to
// /demo/run and reads their Server-Sent Events from the response stream.

const demo = {
  session: null,
  policies: [],
  typed: {},        // slot -> algorithm -> field -> text, kept across switches
  run: null,        // the run being shown
  drawPending: false,
  pendingRows: [],
};

const SOURCES = [...Object.entries(ALGORITHMS).map(([k, a]) => [k, a.title]), ['policy', 'a stored policy (read-only)']];

function setupSources() {
  for (const slot of ['a', 'b']) {
    const sel = $(`#${slot}-source`);
    sel.setAttribute('data-field', `${slot}.algorithm`);
    if (slot === 'b') sel.append(el('option', {value: 'off', text: 'off'}));
    for (const [v, t] of SOURCES) sel.append(el('option', {value: v, text: t}));
    sel.value = slot === 'a' ? 'fixedwindow' : 'slidinglog';
    sel.addEventListener('change', () => renderParams(slot));
    renderParams(slot);
  }
}

function renderParams(slot) {
  const box = $(`#${slot}-params`);
  const src = $(`#${slot}-source`).value;
  box.replaceChildren();
  $(`#panel-${slot}`).classList.toggle('off', src === 'off');
  if (src === 'off') return;
  if (src === 'policy') {
    const sel = el('select', {id: `${slot}-policy`, 'data-field': `${slot}.policy`});
    for (const p of demo.policies) sel.append(el('option', {value: p.name, text: `${p.name}: ${p.label}`}));
    if (!demo.policies.length) sel.append(el('option', {value: '', text: 'no policy allows the demo'}));
    const key = el('input', {id: `${slot}-key`, type: 'text', value: 'visitor-1', size: 12, 'data-field': `${slot}.key`});
    box.append(
      el('label', {}, 'policy ', sel), el('span', {class: 'err', 'data-err-for': `${slot}.policy`}),
      el('label', {}, 'key ', key), el('span', {class: 'err', 'data-err-for': `${slot}.key`}),
      el('p', {class: 'hint', text: 'Counted as key "demo:<key>", apart from real callers. The demo never changes the policy: edit it on the management page.'}));
    return;
  }
  const typed = ((demo.typed[slot] ||= {})[src] ||= {});
  for (const f of ALGORITHMS[src].fields) {
    const name = `${slot}.${src}.${f.key}`;
    const input = fieldInput(f, {id: `${slot}-${f.key}`, size: 6, 'data-field': name, placeholder: f.hint || ''}, typed[f.key] ?? f.def);
    input.addEventListener(f.choices ? 'change' : 'input', () => { typed[f.key] = input.value; });
    box.append(el('label', {}, `${f.label} `, input), el('span', {class: 'err', 'data-err-for': name}));
  }
}

function specOf(slot) {
  const src = $(`#${slot}-source`).value;
  if (src === 'off') return null;
  if (src === 'policy') return {policy: $(`#${slot}-policy`).value, key: $(`#${slot}-key`).value};
  const cfg = {};
  for (const f of ALGORITHMS[src].fields) {
    const v = fieldValue(f, $(`#${slot}-${f.key}`).value);
    if (v !== undefined) cfg[f.key] = v;
  }
  return {algorithm: src, [src]: cfg};
}

async function newSession() {
  const res = await fetch('/demo/sessions', {method: 'POST'});
  if (!res.ok) throw await readError(res);
  demo.session = (await res.json()).id;
}

async function loadPolicies() {
  const res = await fetch('/demo/policies');
  if (res.ok) demo.policies = (await res.json()).policies;
}

function setStatus(state, text) {
  const s = $('#status');
  s.dataset.state = state;
  s.textContent = text;
  for (const b of $$('.traffic button')) b.disabled = state === 'running';
}

// paint draws each slot in its algorithm's colour, as the bench report
// does; B keeps its own when both run the same.
function paint(a, b) {
  const name = spec => {
    const alg = spec && (spec.algorithm || (demo.policies.find(p => p.name === spec.policy) || {}).algorithm);
    const cfg = (spec && spec[alg]) || {};
    if (alg === 'tokenbucket' && cfg.period) return 'tokenbucket-interval';
    if (alg === 'slidingwindow') return cfg.segments > 0 ? 'slidingwindow-segmented' : 'slidingwindow-weighted';
    return alg;
  };
  const [na, nb] = [name(a), name(b)];
  document.documentElement.style.setProperty('--a', COLOURS[na] || '');
  document.documentElement.style.setProperty('--b', nb !== na && COLOURS[nb] || '');
}

async function fire(traffic, retried = false) {
  const form = document.body;
  clearErrors(form);
  $('#run-error').textContent = '';
  const body = {session: demo.session, a: specOf('a'), b: specOf('b'), traffic};
  paint(body.a, body.b);
  setStatus('running', 'Sending…');
  let res;
  try {
    res = await fetch('/demo/run', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
  } catch (e) {
    setStatus('error', 'The server cannot be reached.');
    return;
  }
  if (!res.ok) {
    const err = await readError(res);
    if (res.status === 404 && err.field === 'session' && !retried) {
      await newSession();
      return fire(traffic, true);
    }
    // A traffic field is looked for in the group of the mode sent first
    // (a burst's and an edge's count are both traffic.n).
    const shown = showError([$(`#group-${traffic.mode}`), form].filter(Boolean), err, $('#run-error'));
    setStatus('error', `Not sent: see the message ${where(shown)}.`);
    return;
  }
  await readStream(res.body);
}

// where says where el, a message, is from the status line: above or
// below it, and beside which field.
function where(el) {
  const above = el.compareDocumentPosition($('#status')) & Node.DOCUMENT_POSITION_FOLLOWING;
  const field = el.dataset.errFor ? $(`[data-field="${CSS.escape(el.dataset.errFor)}"][aria-invalid]`) : null;
  if (!field) return above ? 'above' : 'below';
  const legend = field.closest('fieldset')?.querySelector('legend')?.firstChild?.textContent.trim();
  const label = (field.closest('label')?.firstChild?.textContent || field.getAttribute('aria-label') || '').trim();
  return `${above ? 'above' : 'below'}, beside ${legend ? `${legend}'s ${label}` : `the ${label}`}`;
}

// readStream parses the text/event-stream body: blocks separated by a
// blank line, each with "event:" and "data:" lines.
async function readStream(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ended = false;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = 'message', data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data += line.slice(5).trim();
      }
      if (data) ended = handle(event, JSON.parse(data)) || ended;
    }
  }
  if (!ended) setStatus('error', 'The stream ended early.');
}

function handle(event, d) {
  switch (event) {
  case 'start': {
    const slots = d.limiters.map(l => l.slot);
    demo.run = {slots, slices: [], slice: d.slice_ms, edge: d.edge_ms, requests: d.requests,
      allowed: {a: 0, b: 0}, refused: {a: 0, b: 0}, errors: {a: 0, b: 0}};
    for (const slot of ['a', 'b']) {
      const l = d.limiters.find(x => x.slot === slot);
      $(`#panel-${slot}`).classList.toggle('off', !l);
      $(`#${slot}-label`).textContent = l ? l.label : '(off)';
      $(`#${slot}-allowed`).textContent = '0';
      $(`#${slot}-refused`).textContent = '0';
      $(`#${slot}-remaining`).textContent = '–';
      $(`#${slot}-last`).textContent = '';
    }
    $('#slice-note').textContent = `(slices of ${d.slice_ms} ms)`;
    setStatus('running', `Running: ${d.requests} request${d.requests === 1 ? '' : 's'} (${d.mode})…`);
    scheduleDraw();
    return false;
  }
  case 'decision': {
    const r = demo.run;
    const k = Math.floor(d.t / r.slice);
    while (r.slices.length <= k) r.slices.push({offered: 0, a: 0, b: 0});
    if (d.slot === r.slots[0]) r.slices[k].offered++;
    let outcome;
    if (d.error) { r.errors[d.slot]++; outcome = 'error'; }
    else if (d.ok) { r.allowed[d.slot]++; r.slices[k][d.slot]++; outcome = 'allowed'; }
    else { r.refused[d.slot]++; outcome = 'refused'; }
    $(`#${d.slot}-allowed`).textContent = r.allowed[d.slot];
    $(`#${d.slot}-refused`).textContent = r.refused[d.slot];
    if (!d.error) $(`#${d.slot}-remaining`).textContent = `${d.remaining} of ${d.limit}`;
    const retry = d.retry_after_ms !== undefined ? `${fmtMs(d.retry_after_ms)}` : '';
    $(`#${d.slot}-last`).textContent = d.error ? `error: ${d.error}` :
      d.ok ? `#${d.i + 1} allowed` : `#${d.i + 1} refused: ${d.reason}${retry ? `, retry after ${retry}` : ''}`;
    demo.pendingRows.push(el('tr', {class: outcome},
      el('td', {text: d.i + 1}), el('td', {text: d.t.toFixed(1)}), el('td', {text: d.slot.toUpperCase()}),
      el('td', {text: outcome}), el('td', {text: d.error || d.reason || ''}), el('td', {text: retry}),
      el('td', {text: d.error ? '' : d.remaining})));
    scheduleDraw();
    return false;
  }
  case 'done': {
    const r = demo.run;
    const parts = r.slots.map(s => `${s.toUpperCase()}: ${r.allowed[s]} allowed, ${r.refused[s]} refused` + (r.errors[s] ? `, ${r.errors[s]} errors` : ''));
    setStatus('done', `Done. ${parts.join('; ')}.` + (d.stopped ? ` Stopped early: ${d.stopped}.` : ''));
    scheduleDraw();
    return true;
  }
  }
  return false;
}

function fmtMs(v) { return v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`; }

function scheduleDraw() {
  if (demo.drawPending) return;
  demo.drawPending = true;
  requestAnimationFrame(() => {
    demo.drawPending = false;
    flushRows();
    drawChart();
  });
}

function flushRows() {
  if (!demo.pendingRows.length) return;
  const log = $('#log');
  const frag = document.createDocumentFragment();
  for (const row of demo.pendingRows.reverse()) frag.append(row);
  demo.pendingRows = [];
  log.prepend(frag);
  while (log.rows.length > 200) log.deleteRow(-1);
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function drawChart() {
  const chart = $('#chart');
  chart.replaceChildren();
  const r = demo.run;
  $('.edge-key').hidden = !(r && r.edge !== undefined);
  const W = 800, H = 240, left = 40, bottom = 24, top = 10;
  if (!r || !r.slices.length) {
    chart.append(svg('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty'}, 'Send some requests'));
    return;
  }
  const n = Math.max(r.slices.length, 10);
  const peak = Math.max(1, ...r.slices.map(s => Math.max(s.offered, s.a, s.b)));
  const gw = (W - left - 4) / n;
  const bars = r.slots.length + 1;
  const bw = Math.max(1, (gw * 0.8) / bars);
  const y = v => top + (H - top - bottom) * (1 - v / peak);
  chart.append(svg('line', {x1: left, y1: y(0), x2: W, y2: y(0), class: 'axis'}));
  chart.append(svg('text', {x: left - 6, y: y(peak) + 4, 'text-anchor': 'end', class: 'tick'}, peak));
  chart.append(svg('text', {x: left - 6, y: y(0), 'text-anchor': 'end', class: 'tick'}, 0));
  r.slices.forEach((s, i) => {
    const x0 = left + i * gw + gw * 0.1;
    [['offered', s.offered], ...r.slots.map(k => [k, s[k]])].forEach(([name, v], j) => {
      if (!v) return;
      const rect = svg('rect', {x: x0 + j * bw, y: y(v), width: bw, height: y(0) - y(v), class: `bar ${name}`, 'data-slice': i});
      rect.append(svg('title', {}, `${name === 'offered' ? 'offered' : 'admitted by ' + name.toUpperCase()}: ${v} at ${i * r.slice}–${(i + 1) * r.slice} ms`));
      chart.append(rect);
    });
  });
  const every = Math.ceil(n / 10);
  for (let i = 0; i < n; i += every) {
    chart.append(svg('text', {x: left + i * gw, y: H - 6, class: 'tick'}, `${(i * r.slice / 1000).toFixed(r.slice < 1000 ? 1 : 0)} s`));
  }
  if (r.edge !== undefined) {
    const x = left + (r.edge / r.slice) * gw;
    chart.append(svg('line', {x1: x, y1: top, x2: x, y2: y(0), class: 'edge'}));
    chart.append(svg('text', {x: x + 4, y: top + 12, class: 'tick'}, 'window edge'));
  }
}

function trafficOf(mode) {
  switch (mode) {
  case 'one': return {mode};
  case 'burst': return {mode, n: fieldValue({}, $('#burst-n').value)};
  case 'steady': return {mode, rate: fieldValue({}, $('#steady-rate').value), seconds: fieldValue({}, $('#steady-seconds').value)};
  case 'edge': return {mode, n: fieldValue({}, $('#edge-n').value)};
  }
}

function setLimiter(slot, alg, values) {
  $(`#${slot}-source`).value = alg;
  demo.typed[slot] = {...demo.typed[slot], [alg]: values};
  renderParams(slot);
}

function setup() {
  setupSources();
  paint(specOf('a'), specOf('b'));
  $('#fire-one').addEventListener('click', () => fire(trafficOf('one')));
  $('#fire-burst').addEventListener('click', () => fire(trafficOf('burst')));
  $('#fire-steady').addEventListener('click', () => fire(trafficOf('steady')));
  $('#fire-edge').addEventListener('click', () => fire(trafficOf('edge')));
  $('#scenario-edge').addEventListener('click', () => {
    setLimiter('a', 'fixedwindow', {limit: '10', window: '1s'});
    setLimiter('b', 'slidinglog', {limit: '10', window: '1s'});
    $('#edge-n').value = '10';
    fire(trafficOf('edge'));
  });
  $('#scenario-steady').addEventListener('click', () => {
    setLimiter('a', 'tokenbucket', {rate: '5', burst: '5', period: '', per_period: ''});
    setLimiter('b', 'fixedwindow', {limit: '5', window: '1s'});
    $('#steady-rate').value = '20';
    $('#steady-seconds').value = '5';
    fire(trafficOf('steady'));
  });
  $('#new-session').addEventListener('click', async () => {
    await newSession();
    setStatus('ready', 'New limiters: every count starts afresh.');
  });
  drawChart();
  Promise.all([newSession(), loadPolicies()]).then(() => {
    for (const slot of ['a', 'b']) if ($(`#${slot}-source`).value === 'policy') renderParams(slot);
    setStatus('ready', 'Ready.');
  }, err => setStatus('error', `The demo cannot start: ${err.error || err}`));
}

setup();
