'use strict';
// The management page: every action is a call to the admin API under /api/,
// with the token in the Authorization header. The page checks nothing
// itself: the API's errors ({"error", "field"}) are shown beside the field.

const admin = {
  token: sessionStorage.getItem('limitkit-token') || '',
  actor: sessionStorage.getItem('limitkit-actor') || '',
  policies: [],
  editing: null, // the policy being edited, as the API returned it; null for a new one
  typed: {},
};

class APIError extends Error {
  constructor(status, body) { super(body.error); this.status = status; this.body = body; }
}

async function api(method, path, body, token = admin.token) {
  const headers = {Authorization: `Bearer ${token}`};
  if (admin.actor) headers['X-Actor'] = admin.actor;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`/api${path}`, {method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store'});
  if (!res.ok) throw new APIError(res.status, await readError(res));
  return res.status === 204 ? null : res.json();
}

// handle shows err beside its field under root (or in fallback); a refused
// token signs the page out.
function handle(err, root, fallback) {
  if (!(err instanceof APIError)) { fallback.textContent = `The server cannot be reached: ${err}`; return; }
  if (err.status === 401) { signOut(`Your token was refused (${err.message}): sign in again.`); return; }
  showError(root, err.body, fallback);
}

async function signIn(ev) {
  ev.preventDefault();
  const form = $('#signin-form');
  clearErrors(form);
  const token = $('#token').value.trim();
  const actor = $('#actor').value.trim();
  if (!/^[\x21-\x7e]*$/.test(actor)) {
    showError(form, {field: 'actor', error: 'letters, digits and punctuation only, without spaces'}, $('#token-error'));
    return;
  }
  try {
    const list = await api('GET', '/policies', undefined, token);
    admin.token = token;
    admin.actor = actor;
    sessionStorage.setItem('limitkit-token', token);
    sessionStorage.setItem('limitkit-actor', actor);
    $('#token').value = '';
    showApp(list);
  } catch (err) {
    if (err instanceof APIError) showError(form, {field: 'token', error: `Not signed in: ${err.message}`}, $('#token-error'));
    else $('#token-error').textContent = `The server cannot be reached: ${err}`;
  }
}

function signOut(message) {
  notice('');
  admin.token = '';
  admin.editing = null;
  sessionStorage.removeItem('limitkit-token');
  $('#editor').hidden = true;
  $('#app').hidden = true;
  $('#signin').hidden = false;
  $('#token-error').textContent = message || '';
}

function showApp(list) {
  $('#signin').hidden = true;
  $('#app').hidden = false;
  $('#whoami').textContent = `Signed in as ${admin.actor || 'admin'}.`;
  render(list);
  loadEnvoy();
}

async function refresh() {
  $('#list-error').textContent = '';
  try {
    render(await api('GET', '/policies'));
  } catch (err) {
    handle(err, $('#app'), $('#list-error'));
  }
  loadEnvoy();
}

// loadEnvoy shows the domains and descriptors of the Envoy rate limit
// service, when the server has one.
async function loadEnvoy() {
  let view;
  try {
    const res = await fetch('/envoy/config', {headers: {Authorization: `Bearer ${admin.token}`}, cache: 'no-store'});
    if (!res.ok) return;
    view = await res.json();
  } catch (err) {
    return;
  }
  $('#envoy').hidden = !view.enabled;
  if (!view.enabled) return;
  $('#envoy-source').textContent = `Rules of ${view.path}, reloaded when they change.`;
  $('#envoy-error').textContent = view.error ? `The files do not load (the last valid rules are served): ${view.error}` : '';
  const body = $('#envoy-rules');
  body.replaceChildren();
  for (const d of view.domains) {
    for (const r of d.descriptors) {
      body.append(el('tr', {'data-domain': d.domain},
        el('td', {text: d.domain}), el('td', {class: 'path', text: r.path}), el('td', {class: 'limit', text: r.limit}),
        el('td', {text: r.name || ''}), el('td', {text: (r.replaces || []).join(', ')}),
        el('td', {text: r.shadow_mode ? 'yes' : ''}), el('td', {text: r.failure_mode})));
    }
    if (!d.descriptors.length) body.append(el('tr', {}, el('td', {text: d.domain}), el('td', {colspan: 6, text: 'No limits.'})));
  }
}

function describe(p) {
  const c = p[p.algorithm] || {};
  switch (p.algorithm) {
  case 'tokenbucket':
    return c.period ? `token bucket: ${c.per_period} every ${c.period}, burst ${c.burst}` : `token bucket: ${c.rate}/s, burst ${c.burst}`;
  case 'fixedwindow': return `fixed window: ${c.limit} per ${c.window}`;
  case 'slidingwindow': return `sliding window${c.segments ? `, ${c.segments} segments` : ', weighted'}: ${c.limit} per ${c.window}`;
  case 'slidinglog': return `sliding log: ${c.limit} per ${c.window}`;
  case 'concurrency': return `concurrency: ${c.limit} at once`;
  }
  // Another algorithm (a calendar quota): its parameters as they are.
  const params = Object.entries(c).map(([k, v]) => `${k.replace(/_/g, ' ')} ${typeof v === 'object' ? JSON.stringify(v) : v}`);
  return params.length ? `${p.algorithm}: ${params.join(', ')}` : p.algorithm;
}

function when(t) { return t ? new Date(t).toLocaleString() : ''; }

// render shows the policies of a list the API returned, and names the
// stored policies that do not decode (which only the API can replace or
// delete).
function render(list) {
  const policies = list.policies;
  admin.policies = policies;
  if (list.undecodable && list.undecodable.length) {
    $('#list-error').textContent = `Stored policies that do not decode, left as they were applied: ${list.undecodable.join(', ')}. Replace (PUT) or delete them through the API.`;
  }
  const body = $('#policies');
  body.replaceChildren();
  for (const p of policies) {
    const edit = el('button', {type: 'button', class: 'secondary edit', text: 'Edit'});
    edit.addEventListener('click', () => openEditor(p));
    const del = el('button', {type: 'button', class: 'danger delete', text: 'Delete'});
    del.addEventListener('click', () => remove(p, del));
    body.append(el('tr', {'data-name': p.name},
      el('td', {class: 'name', text: p.name}), el('td', {class: 'limit', text: describe(p)}),
      el('td', {text: p.key}), el('td', {text: (p.apps || []).join(', ')}),
      el('td', {class: 'version', text: p.version}),
      el('td', {class: 'updated', text: `${p.updated_by || ''}, ${when(p.updated_at)}`}),
      el('td', {class: 'created', text: `${p.created_by || ''}, ${when(p.created_at)}`}),
      el('td', {class: 'actions'}, edit, ' ', del)));
  }
  if (!policies.length) body.append(el('tr', {}, el('td', {colspan: 8, text: 'No policies yet.'})));
  const sel = $('#reset-policy');
  const current = sel.value;
  sel.replaceChildren(...policies.map(p => el('option', {value: p.name, text: p.name})));
  if (policies.some(p => p.name === current)) sel.value = current;
  keyHint();
}

// keyHint suggests a key of the policy chosen in the keys form: the demo
// page's keys only for a policy the demo may use.
function keyHint() {
  const p = admin.policies.find(p => p.name === $('#reset-policy').value);
  let hint = '';
  if (p && p.key === 'global') hint = 'any: a global policy has one count';
  else if (p && (p.apps || []).some(a => a === 'demo' || a === '*')) hint = `a ${p.key}; the demo page's visitor-1 is demo:visitor-1`;
  else if (p) hint = `a ${p.key}, as the applications pass it`;
  $('#reset-key').placeholder = hint;
}

function openEditor(p) {
  notice('');
  const form = $('#editor');
  clearErrors(form);
  $('#editor-error').textContent = '';
  admin.editing = p;
  admin.typed = {};
  $('#editor-title').textContent = p ? `Edit policy ${p.name} (version ${p.version})` : 'New policy';
  $('#p-name').value = p ? p.name : '';
  $('#p-name').disabled = !!p;
  $('#p-algorithm').value = p ? p.algorithm : 'tokenbucket';
  if (p) admin.typed[p.algorithm] = Object.fromEntries(Object.entries(p[p.algorithm] || {}).map(([k, v]) => [k, String(v)]));
  $('#p-key').value = p ? p.key : 'user';
  $('#p-apps').value = p ? (p.apps || []).join(', ') : '';
  renderParams();
  form.hidden = false;
  form.scrollIntoView({block: 'nearest'});
}

function renderParams() {
  const alg = $('#p-algorithm').value;
  const typed = (admin.typed[alg] ||= {});
  const box = $('#p-params');
  box.replaceChildren();
  for (const f of (ALGORITHMS[alg] || {fields: []}).fields) {
    const name = `${alg}.${f.key}`;
    const input = fieldInput(f, {id: `p-${f.key}`, size: 8, 'data-field': name, placeholder: f.hint || ''}, typed[f.key] ?? (admin.editing ? '' : f.def));
    input.addEventListener(f.choices ? 'change' : 'input', () => { typed[f.key] = input.value; });
    box.append(el('label', {}, `${f.label} `, input), el('span', {class: 'err', 'data-err-for': name}));
  }
}

// policyOf builds the JSON form of the policy from the editor. Settings
// the form does not show (a queue) are kept from the policy edited.
function policyOf() {
  const alg = $('#p-algorithm').value;
  const p = admin.editing;
  const cfg = p && p.algorithm === alg ? {...p[alg]} : {};
  for (const f of (ALGORITHMS[alg] || {fields: []}).fields) {
    delete cfg[f.key];
    const v = fieldValue(f, $(`#p-${f.key}`).value);
    if (v !== undefined) cfg[f.key] = v;
  }
  const apps = $('#p-apps').value.split(',').map(s => s.trim()).filter(s => s);
  const out = {name: $('#p-name').value.trim(), algorithm: alg, [alg]: cfg, key: $('#p-key').value.trim(), apps};
  if (p) out.version = p.version;
  return out;
}

async function save(ev) {
  ev.preventDefault();
  notice('');
  const form = $('#editor');
  clearErrors(form);
  $('#editor-error').textContent = '';
  const body = policyOf();
  try {
    const saved = admin.editing
      ? await api('PUT', `/policies/${encodeURIComponent(admin.editing.name)}`, body)
      : await api('POST', '/policies', body);
    form.hidden = true;
    admin.editing = null;
    notice(`Saved ${saved.name} at version ${saved.version}.`);
    await refresh();
  } catch (err) {
    if (err instanceof APIError && err.status === 409 && err.body.field === 'version') {
      err.body.error += ': someone changed this policy since you opened it. Refresh, then edit again.';
    }
    handle(err, form, $('#editor-error'));
  }
}

async function remove(p, button) {
  notice('');
  if (button.dataset.confirm !== 'yes') {
    button.dataset.confirm = 'yes';
    button.textContent = `Really delete ${p.name}?`;
    return;
  }
  try {
    await api('DELETE', `/policies/${encodeURIComponent(p.name)}` + (p.version ? `?version=${p.version}` : ''));
    notice(`Deleted ${p.name}.`);
    await refresh();
  } catch (err) {
    handle(err, $('#app'), $('#list-error'));
  }
}

function keyPath() {
  return `/policies/${encodeURIComponent($('#reset-policy').value)}/keys/${encodeURIComponent($('#reset-key').value.trim())}`;
}

// keyForm clears the keys form's messages and returns the form, or null,
// with the error shown, when no key is given.
function keyForm() {
  notice('');
  const form = $('#keys');
  clearErrors(form);
  $('#keys-error').textContent = '';
  $('#reset-msg').textContent = '';
  if (!$('#reset-key').value.trim()) { showError(form, {field: 'key', error: 'a key is required'}, $('#keys-error')); return null; }
  return form;
}

async function peek(ev) {
  ev.preventDefault();
  const form = keyForm();
  if (!form) return;
  try {
    const f = await api('GET', keyPath());
    $('#reset-msg').textContent = `${f.key} under ${f.policy}: ${f.remaining} of ${f.limit} remaining` +
      (f.retry_after ? `, next permit in ${f.retry_after}` : '') + `, all back in ${f.reset_after}.`;
  } catch (err) {
    handle(err, form, $('#keys-error'));
  }
}

async function reset() {
  const form = keyForm();
  if (!form) return;
  try {
    await api('POST', `${keyPath()}/reset`);
    $('#reset-msg').textContent = `Reset ${$('#reset-key').value.trim()} under ${$('#reset-policy').value}: its limit starts afresh.`;
  } catch (err) {
    handle(err, form, $('#keys-error'));
  }
}

// notice tells of an action done; the next action clears it.
function notice(text) { $('#notice').textContent = text; }

function setup() {
  const algs = $('#p-algorithm');
  for (const [k, a] of Object.entries(ALGORITHMS)) algs.append(el('option', {value: k, text: a.title}));
  algs.addEventListener('change', renderParams);
  $('#signin-form').addEventListener('submit', signIn);
  $('#signout').addEventListener('click', () => signOut('Signed out.'));
  $('#refresh').addEventListener('click', () => { notice(''); refresh(); });
  $('#reset-policy').addEventListener('change', keyHint);
  $('#new-policy').addEventListener('click', () => openEditor(null));
  $('#editor').addEventListener('submit', save);
  $('#cancel').addEventListener('click', () => { $('#editor').hidden = true; admin.editing = null; notice(''); });
  $('#keys').addEventListener('submit', peek);
  $('#reset-btn').addEventListener('click', reset);
  $('#actor').value = admin.actor;
  if (admin.token) {
    api('GET', '/policies').then(list => showApp(list), err => handle(err, $('#signin'), $('#token-error')));
  }
}

setup();
