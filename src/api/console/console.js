// The ansible-operator console: plain JavaScript over the operator's JSON API (/api/v1). The bearer
// token lives in this tab's sessionStorage only. Every value from the cluster goes into the page as
// text, never as HTML.
'use strict';

const TOKEN = 'ansible-operator.token';
const NAMESPACE = 'ansible-operator.namespace';
const REFRESH_MS = 1500;
const app = document.getElementById('app');
const nav = document.getElementById('nav');

/** The work of the current view (timers, log streams), stopped when the view changes. */
let view = { timers: [], streams: [] };

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// ---------------------------------------------------------------- DOM helpers

function h(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else if (name === 'text') element.textContent = value;
    else element.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null && child !== false) {
      element.append(child instanceof Node ? child : String(child));
    }
  }
  return element;
}

function s(tag, attributes, ...children) {
  const element = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attributes || {})) element.setAttribute(name, value);
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

function badge(state) {
  return h('span', { class: `badge ${state}`, text: state });
}

function ago(time) {
  if (!time) return '';
  const seconds = Math.max(0, (Date.now() - Date.parse(time)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)}h ago`;
  return `${Math.round(seconds / 86400)}d ago`;
}

function seconds(value) {
  if (value === undefined || value === null) return '';
  return value < 10 ? `${value.toFixed(2)} s` : `${value.toFixed(1)} s`;
}

function triggerText(trigger) {
  if (!trigger) return '';
  switch (trigger.reason) {
    case 'SpecChanged': return `spec changed (generation ${trigger.fromGeneration} → ${trigger.toGeneration})`;
    case 'DependentChanged': {
      const d = trigger.dependent || {};
      return `${d.kind} ${d.namespace ? d.namespace + '/' : ''}${d.name} changed`;
    }
    case 'AnnotationsChanged': return 'annotations changed';
    case 'ObjectChanged': return 'object changed';
    case 'Retry': return `retry, attempt ${trigger.attempt}`;
    case 'Manual': return trigger.by ? `manual, by ${trigger.by}` : 'manual';
    case 'RequeueAfter': return 'requeue_after';
    case 'Resync': return 'periodic resync';
    default: return trigger.reason;
  }
}

function stop() {
  view.timers.forEach(clearInterval);
  view.streams.forEach((controller) => controller.abort());
  view = { timers: [], streams: [] };
}

function every(ms, action) {
  view.timers.push(setInterval(action, ms));
}

// ---------------------------------------------------------------- API

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN);
  const headers = Object.assign({}, options.headers, { Authorization: `Bearer ${token}` });
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let message = response.statusText;
    try {
      message = (await response.json()).message || message;
    } catch (_) { /* not JSON */ }
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN);
      login(`The token was not accepted: ${message}`);
    }
    throw new ApiError(response.status, message);
  }
  const type = response.headers.get('content-type') || '';
  return type.includes('json') ? response.json() : response.text();
}

function namespaceQuery() {
  const namespace = sessionStorage.getItem(NAMESPACE) || '';
  return namespace ? `?namespace=${encodeURIComponent(namespace)}` : '';
}

function crPath(kind, cr) {
  const group = kind.group || 'core';
  return `/api/v1/kinds/${group}/${kind.plural}/crs/${cr.namespace || '-'}/${encodeURIComponent(cr.name)}`;
}

function crHash(kind, cr) {
  return `#/cr/${kind.group || 'core'}/${kind.plural}/${cr.namespace || '-'}/${encodeURIComponent(cr.name)}`;
}

// ---------------------------------------------------------------- sign in

function login(message) {
  stop();
  nav.replaceChildren();
  document.getElementById('sign-out').hidden = true;
  document.getElementById('namespace-filter').hidden = true;
  document.getElementById('user').textContent = '';
  const token = h('textarea', { id: 'token', placeholder: 'eyJhbGciOi…', spellcheck: 'false' });
  const error = h('p', { class: 'error', id: 'login-error', text: message, hidden: !message });
  const submit = async () => {
    const value = token.value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN, value);
    try {
      await api('/api/v1/kinds');
      route();
    } catch (e) {
      if (e.status !== 401) {
        error.textContent = e.message;
        error.hidden = false;
      }
    }
  };
  app.replaceChildren(h('section', { class: 'card login' },
    h('h1', { text: 'Sign in' }),
    h('p', { text: 'Paste a Kubernetes bearer token. The console sees exactly what the token\'s RBAC allows: reading a kind needs get and list on it, "Reconcile now", "Pause" and "Resume" need patch. The token stays in this browser tab.' }),
    h('pre', { text: 'kubectl create token <service-account> -n <namespace>' }),
    token,
    error,
    h('p', {}, h('button', { id: 'sign-in', class: 'primary', type: 'button', onclick: submit, text: 'Sign in' }))));
  token.focus();
}

// ---------------------------------------------------------------- kinds and CRs

async function home() {
  nav.replaceChildren();
  const sections = h('div', { id: 'kinds' });
  app.replaceChildren(sections);
  const { kinds } = await api('/api/v1/kinds');
  const render = async () => {
    const cards = await Promise.all(kinds.map(kindCard));
    sections.replaceChildren(...cards);
  };
  await render();
  every(REFRESH_MS * 2, () => render().catch(() => {}));
}

async function kindCard(kind) {
  const title = h('h2', {}, kind.kind, ' ', h('span', { class: 'muted', text: `${kind.plural}.${kind.group || 'core'}/${kind.version}` }));
  let listed;
  try {
    listed = await api(`${kind.path}/crs${namespaceQuery()}`);
  } catch (e) {
    const hint = e.status === 403 && !sessionStorage.getItem(NAMESPACE)
      ? ' Enter a namespace you may read above.' : '';
    return h('section', { class: 'card kind' }, title, h('p', { class: 'error', text: e.message + hint }));
  }
  if (!listed.items.length) {
    return h('section', { class: 'card kind' }, title, h('p', { class: 'muted', text: 'No resources.' }));
  }
  const rows = listed.items.map((cr) => h('tr', { class: 'cr-row' },
    h('td', {}, h('a', { href: crHash(kind, cr), text: cr.name })),
    kind.namespaced ? h('td', { text: cr.namespace }) : null,
    h('td', {}, badge(cr.state)),
    h('td', { text: cr.lastRun ? `${triggerText(cr.lastRun.trigger)} · ${cr.lastRun.result}` : '' }),
    h('td', { class: 'muted', text: cr.inFlight ? 'running now' : ago(cr.lastRun && cr.lastRun.completionTime) }),
    h('td', { class: 'muted', text: cr.message || '' })));
  return h('section', { class: 'card kind' }, title, h('table', {},
    h('thead', {}, h('tr', {},
      h('th', { text: 'Name' }), kind.namespaced ? h('th', { text: 'Namespace' }) : null, h('th', { text: 'State' }),
      h('th', { text: 'Last run' }), h('th', { text: 'When' }), h('th', { text: 'Message' }))),
    h('tbody', {}, rows)));
}

// ---------------------------------------------------------------- one CR

const VERDICTS = { changed: 'changed', ok: 'ok', notChecked: 'not checked', skipped: 'skipped', failed: 'failed', unreachable: 'unreachable' };

/** A plan's answer: one row per task and host with its verdict, message and diffs, then the counts. */
function planView(plan) {
  const show = (value) => (value === undefined ? '(absent)' : JSON.stringify(value));
  const tasks = (plan.tasks || []).map((task) => h('li', { class: `task ${task.verdict}` },
    h('span', { class: `badge ${task.verdict}`, text: VERDICTS[task.verdict] || task.verdict }),
    h('span', { text: ` ${task.name} [${task.host}]` }),
    task.object ? h('span', { class: 'muted', text: ` ${task.object}` }) : null,
    task.message ? h('div', { class: 'message', text: task.message }) : null,
    (task.diff || []).length ? h('pre', { class: 'diff', text: task.diff.map((d) => (d.type === 'field'
      ? `${d.path}: ${show(d.before)} → ${show(d.after)}`
      : `--- ${d.header}\n${d.before}+++ ${d.header}\n${d.after}`)).join('\n') }) : null));
  const s = plan.summary || {};
  return h('div', {},
    h('p', { class: plan.result === 'Successful' ? 'notice' : 'error', id: 'plan-result',
      text: `${plan.result}: ${s.changed} changed, ${s.ok} ok, ${s.notChecked} not checked, ${s.skipped} skipped, ${s.failed} failed${plan.message ? ` · ${plan.message}` : ''}` }),
    h('ul', { class: 'plan-tasks' }, tasks));
}

async function crPage(group, plural, namespace, name) {
  const { kinds } = await api('/api/v1/kinds');
  const kind = kinds.find((k) => (k.group || 'core') === group && k.plural === plural);
  if (!kind) throw new ApiError(404, `${plural}.${group} is not a watched kind`);
  const base = crPath(kind, { namespace: namespace === '-' ? '' : namespace, name });
  nav.replaceChildren(h('span', { text: '›' }), h('span', { text: kind.kind }), h('span', { text: '›' }),
    h('span', { text: namespace === '-' ? name : `${namespace}/${name}` }));

  const heading = h('h1', {});
  const notice = h('p', { class: 'notice', id: 'notice', hidden: true });
  const conditions = h('tbody', {});
  const timeline = h('ul', { id: 'timeline' });
  const runPane = h('div', { id: 'run' });
  const chart = h('div', { id: 'task-chart' });
  const log = h('pre', { id: 'log' });
  const logState = h('span', { class: 'live', id: 'log-state' });
  const logRefused = h('p', { class: 'error', id: 'log-refused', hidden: true });
  const reconcile = h('button', { id: 'reconcile', class: 'primary', type: 'button', text: 'Reconcile now' });
  const pause = h('button', { id: 'pause', type: 'button', text: 'Pause' });
  // Plan: the spec, editable; what the edited spec would do, from a check-mode run (needs update).
  const specEditor = h('textarea', { id: 'spec', rows: 8, spellcheck: 'false' });
  const planButton = h('button', { id: 'plan-button', class: 'primary', type: 'button', text: 'Plan' });
  const planPane = h('div', { id: 'plan' });
  app.replaceChildren(
    h('div', { class: 'card' }, heading, notice,
      h('table', { class: 'conditions' }, h('thead', {}, h('tr', {},
        h('th', { text: 'Condition' }), h('th', { text: 'Status' }), h('th', { text: 'Reason' }),
        h('th', { text: 'Message' }), h('th', { text: 'Changed' }))), conditions)),
    h('div', { class: 'grid' },
      h('section', { class: 'card' }, h('h2', { text: 'Runs' }), timeline),
      h('section', {},
        h('div', { class: 'card' }, runPane, chart),
        h('div', { class: 'card' }, h('div', { class: 'log-head' }, h('h2', { text: 'Log' }), logState), logRefused, log))),
    h('section', { class: 'card' },
      h('div', { class: 'log-head' }, h('h2', { text: 'Plan a change' }), planButton),
      h('p', { class: 'muted', text: 'Edit the spec (JSON) and press Plan: the playbook runs in check mode, every write a dry run; nothing changes.' }),
      specEditor, planPane));

  planButton.addEventListener('click', async () => {
    let spec;
    try {
      spec = JSON.parse(specEditor.value);
    } catch (e) {
      planPane.replaceChildren(h('p', { class: 'error', text: `The spec is not JSON: ${e.message}` }));
      return;
    }
    planButton.disabled = true;
    planPane.replaceChildren(h('p', { class: 'muted', text: 'Planning…' }));
    try {
      const plan = await api(`${base}/plan`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ spec }),
      });
      planPane.replaceChildren(planView(plan));
    } catch (e) {
      planPane.replaceChildren(h('p', { class: 'error', text: e.message }));
    }
    planButton.disabled = false;
  });

  // selected: the run shown; awaiting: the newest run when "Reconcile now" was pressed.
  // specTouched: the user has gone into the spec editor, which then keeps what they type.
  const state = { detail: null, selected: null, shown: null, awaiting: undefined, ending: undefined, specTouched: false };
  const touchSpec = () => { state.specTouched = true; };
  specEditor.addEventListener('focus', touchSpec);
  specEditor.addEventListener('input', touchSpec);

  // POSTs an action on the CR from `button`; the notice says what `said` makes of the answer, or
  // why it was refused.
  const act = async (button, action, said) => {
    button.disabled = true;
    try {
      const answer = await api(`${base}/${action}`, { method: 'POST' });
      notice.textContent = said(answer);
      notice.className = 'notice';
    } catch (e) {
      notice.textContent = e.message;
      notice.className = 'error';
    }
    notice.hidden = false;
    button.disabled = false;
    refresh().catch(() => {});
  };

  reconcile.addEventListener('click', () => {
    // The newest run before the request: a refresh while the request is answered may already
    // list the requested run.
    const before = runs()[0] ? runs()[0].name : null;
    act(reconcile, 'reconcile', (answer) => {
      state.awaiting = before;
      return `Reconcile requested by ${answer.by}; the run appears below when it starts.`;
    });
  });

  // Pause or resume: the API sets or removes the CR's paused annotation (needs patch on the CR).
  pause.addEventListener('click', () => {
    act(pause, state.detail && state.detail.paused ? 'resume' : 'pause', (answer) => (answer.paused
      ? `Paused by ${answer.by}: nothing runs until it is resumed.`
      : `Resumed by ${answer.by}; it runs now.`));
  });

  const runs = () => {
    const detail = state.detail;
    // The CR's current spec until the user goes into the editor: a refresh never writes over
    // what they are typing, even after they emptied it.
    if (detail && !state.specTouched) specEditor.value = JSON.stringify(detail.spec || {}, null, 2);
    const list = detail.runs.slice();
    if (detail.inFlight) list.unshift(detail.inFlight);
    return list;
  };

  const refresh = async () => {
    const previous = state.detail;
    state.detail = await api(base);
    const detail = state.detail;
    heading.replaceChildren(detail.name, badge(detail.state),
      h('span', { class: 'muted', text: `${detail.kind} · generation ${detail.generation}` }),
      detail.paused ? h('span', { class: 'badge Paused', id: 'paused', text: 'Paused' }) : null,
      h('span', { class: 'spacer' }), pause, reconcile);
    pause.textContent = detail.paused ? 'Resume' : 'Pause';
    conditions.replaceChildren(...detail.conditions.map((c) => h('tr', {},
      h('td', { text: c.type }), h('td', { text: c.status }), h('td', { text: c.reason || '' }),
      h('td', { text: c.message || '' }), h('td', { class: 'muted', text: ago(c.lastTransitionTime) }))));
    const list = runs();
    // A run that just ended: its record replaces the in-flight entry (same ident). The run leaves
    // the in-flight list a moment before its record is listed: until the record shows up (10 s at
    // most; with no history kept it never does) the selection waits for it instead of jumping to
    // an older run.
    if (!state.selected || list.some((r) => r.name === state.selected)) {
      state.ending = undefined;
    } else {
      const ended = list.find((r) => r.ident === state.selected);
      const wasInFlight = previous && previous.inFlight && previous.inFlight.name === state.selected;
      if (ended) {
        state.selected = ended.name;
        state.ending = undefined;
      } else if (wasInFlight || (state.ending && Date.now() - state.ending < 10000)) {
        state.ending = state.ending || Date.now();
      } else {
        state.selected = null;
        state.ending = undefined;
      }
    }
    const newest = list[0] && list[0].name;
    // After "Reconcile now", the next new run is selected as soon as it shows up.
    if (state.awaiting !== undefined && newest && newest !== state.awaiting) {
      state.selected = newest;
      state.awaiting = undefined;
    } else if (!state.selected) {
      state.selected = newest || null;
    }
    timeline.replaceChildren(...list.map((run) => {
      const result = run.inFlight ? 'Running' : run.result;
      const counts = run.ansibleResult
        ? `ok ${run.ansibleResult.ok} · changed ${run.ansibleResult.changed} · failed ${run.ansibleResult.failures}` : '';
      return h('li', {
        class: `run ${result}${run.name === state.selected ? ' selected' : ''}`,
        'data-run': run.name,
        onclick: () => { state.selected = run.name; state.awaiting = undefined; refresh().catch(() => {}); },
      },
      h('span', { class: 'dot' }),
      h('div', { class: 'what', text: triggerText(run.trigger) }),
      h('div', { class: 'when', text: run.inFlight ? `running since ${ago(run.startTime)}`
        : `${result} · ${seconds(run.durationSeconds)} · ${ago(run.completionTime)}` }),
      counts ? h('div', { class: 'when', text: counts }) : null,
      run.confirmations ? h('div', { class: 'when', text: `confirmed ${run.confirmations}× since, last ${ago(run.lastConfirmed)}` }) : null);
    }));
    const selected = list.find((r) => r.name === state.selected);
    const key = selected ? `${selected.name}/${selected.inFlight}` : null;
    if (key !== state.shown && !state.ending) {
      state.shown = key;
      await showRun(selected);
    }
  };

  // A log needs its own permission (get on <plural>/log): say so rather than show an empty pane.
  const logFailed = (e) => {
    if (e.status !== 403) {
      log.textContent = e.message;
      return;
    }
    log.textContent = '';
    logRefused.textContent = `You may see this run, not its log: reading a run's log needs get on ` +
      `${kind.plural}/log (apiGroups: ["${kind.group}"], resources: ["${kind.plural}/log"], verbs: ["get"]). ` +
      `Refused: ${e.message}`;
    logRefused.hidden = false;
  };

  const showRun = async (run) => {
    view.streams.forEach((controller) => controller.abort());
    view.streams = [];
    chart.replaceChildren();
    logRefused.hidden = true;
    if (!run) {
      runPane.replaceChildren(h('p', { class: 'muted', text: 'No runs recorded yet.' }));
      log.textContent = '';
      logState.textContent = '';
      return;
    }
    if (run.inFlight) {
      runPane.replaceChildren(h('h2', { text: `Run ${run.ident}` }),
        h('p', {}, badge('Running'), ' ', triggerText(run.trigger), ', started ', ago(run.startTime)),
        h('p', { class: 'muted', text: 'Its tasks appear here when it ends; its log follows live below.' }));
      followLog(`${base}/runs/${encodeURIComponent(run.ident)}/log`);
      return;
    }
    const detail = await api(`${base}/runs/${encodeURIComponent(run.name)}`);
    runPane.replaceChildren(runFacts(detail), inputsButton(`${base}/runs/${encodeURIComponent(run.name)}/inputs`));
    chart.replaceChildren(taskChart(detail));
    log.textContent = 'Loading…';
    logState.textContent = '';
    try {
      log.textContent = await api(`${base}/runs/${encodeURIComponent(run.name)}/log`);
    } catch (e) {
      logFailed(e);
    }
  };

  const followLog = async (path) => {
    const controller = new AbortController();
    view.streams.push(controller);
    log.textContent = '';
    logState.textContent = '● live';
    try {
      const response = await fetch(path, {
        headers: { Accept: 'text/event-stream', Authorization: `Bearer ${sessionStorage.getItem(TOKEN)}` },
        signal: controller.signal,
      });
      if (!response.ok) {
        let message = response.statusText;
        try {
          message = (await response.json()).message || message;
        } catch (_) { /* not JSON */ }
        throw new ApiError(response.status, message);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const lines = block.split('\n');
          const type = (lines.find((l) => l.startsWith('event:')) || 'event: message').slice(6).trim();
          const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
          if (type === 'line') {
            const pinned = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
            log.append(data + '\n');
            if (pinned) log.scrollTop = log.scrollHeight;
          } else if (type === 'end') {
            logState.textContent = 'run ended';
          }
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') return;
      logState.textContent = '';
      logFailed(e);
    }
  };

  await refresh();
  every(REFRESH_MS, () => refresh().catch(() => {}));
}

/** "Download inputs": the run's input files as one JSON file, to replay it with ansible-runner. */
function inputsButton(path) {
  const button = h('button', { id: 'download-inputs', type: 'button', text: 'Download inputs' });
  const state = h('p', { class: 'muted', id: 'inputs-state' });
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const bundle = await api(path);
      const file = `${bundle.name}-inputs.json`;
      const link = h('a', { href: URL.createObjectURL(new Blob([JSON.stringify(bundle, null, 2)], { type: 'application/json' })) });
      link.download = file;
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 1000);
      state.textContent = `Saved ${file}: ${Object.keys(bundle.files).join(', ')}. Write each file under ${bundle.name}/ ` +
        `(or use ansible-operator replay --run), then: ${bundle.command}`;
    } catch (e) {
      state.textContent = `Could not download the inputs: ${e.message}`;
    } finally {
      button.disabled = false;
    }
  });
  return h('div', { class: 'inputs' }, button, state);
}

function runFacts(run) {
  const facts = [
    ['Why', triggerText(run.trigger)],
    ['Result', badge(run.result)],
    ['Executor', run.executor],
    ['Started', `${run.startTime} (${ago(run.startTime)})`],
    ['Duration', seconds(run.durationSeconds)],
    ['Generation', run.owner && run.owner.generation],
  ];
  if (run.ansibleResult) {
    const r = run.ansibleResult;
    facts.push(['Tasks', `ok ${r.ok}, changed ${r.changed}, skipped ${r.skipped}, failed ${r.failures}`]);
  }
  if (run.failedTask) facts.push(['Failed task', `${run.failedTask.task} on ${run.failedTask.host}: ${run.failedTask.message}`]);
  if (run.message) facts.push(['Message', run.message]);
  const objects = run.objects || [];
  return h('div', {},
    h('h2', { text: `Run ${run.ident}` }),
    h('dl', { class: 'facts' }, facts.filter(([, v]) => v !== undefined && v !== null && v !== '')
      .flatMap(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)])),
    objects.length ? h('table', { class: 'objects' },
      h('thead', {}, h('tr', {}, h('th', { text: 'Written' }), h('th', { text: 'Kind' }), h('th', { text: 'Object' }))),
      h('tbody', {}, objects.map((o) => h('tr', {}, h('td', { text: o.verb }),
        h('td', { text: o.group ? `${o.kind}.${o.group}` : o.kind }),
        h('td', { text: o.namespace ? `${o.namespace}/${o.name}` : o.name }))))) : null,
    readsTable(run.reads || []));
}

/** The objects the run read and does not own: a GET by name, or a LIST with its selectors. */
function readsTable(reads) {
  if (!reads.length) return null;
  const what = (r) => {
    const kind = r.kind || r.resource;
    return r.group ? `${kind}.${r.group}` : kind;
  };
  const which = (r) => {
    if (r.name) return r.namespace ? `${r.namespace}/${r.name}` : r.name;
    const selectors = [r.labelSelector, r.fieldSelector].filter(Boolean).join(', ');
    const scope = r.namespace ? `all in ${r.namespace}` : 'all namespaces';
    return selectors ? `${scope} matching ${selectors}` : scope;
  };
  return h('table', { class: 'objects reads' },
    h('thead', {}, h('tr', {}, h('th', { text: 'Read' }), h('th', { text: 'Kind' }), h('th', { text: 'Object' }))),
    h('tbody', {}, reads.map((r) => h('tr', {}, h('td', { text: r.verb }), h('td', { text: what(r) }),
      h('td', { text: which(r) })))));
}

/** Each task as a bar on the run's time axis (tasks run one after another), coloured by status. */
function taskChart(run) {
  const tasks = run.tasks || [];
  if (!tasks.length) return h('p', { class: 'muted', text: 'No task results recorded for this run.' });
  const label = 300;
  const width = 900;
  const row = 22;
  const top = 8;
  const total = tasks.reduce((sum, t) => sum + (t.durationSeconds || 0), 0) || 1;
  const scale = (width - label - 70) / total;
  let start = 0;
  const bars = tasks.map((task, i) => {
    const y = top + i * row;
    const duration = task.durationSeconds || 0;
    const x = label + start * scale;
    start += duration;
    const name = task.name.length > 44 ? `${task.name.slice(0, 43)}…` : task.name;
    return s('g', { class: 'task' },
      s('title', {}, `${task.name} (${task.action}) on ${task.host}: ${task.status}, ${seconds(duration)}`),
      s('text', { x: 0, y: y + 14 }, name),
      s('rect', { x, y: y + 3, width: Math.max(2, duration * scale), height: row - 8, rx: 3, class: task.status }),
      s('text', { x: x + Math.max(2, duration * scale) + 6, y: y + 14, class: 'axis' }, seconds(duration)));
  });
  const height = top + tasks.length * row + 22;
  const axis = s('text', { x: label, y: height - 6, class: 'axis' },
    `0 s … ${seconds(total)} of task time${run.tasksOmitted ? `; ${run.tasksOmitted} more tasks not recorded` : ''}`);
  const legend = h('div', { class: 'legend' }, ['ok', 'changed', 'failed', 'skipped'].map((status) =>
    h('span', {}, h('i', { class: `swatch ${status}` }), status)));
  return h('div', {}, h('h2', { text: 'Tasks' }),
    s('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'task durations' }, bars, axis), legend);
}

// ---------------------------------------------------------------- routing

async function route() {
  stop();
  if (!sessionStorage.getItem(TOKEN)) {
    login('');
    return;
  }
  document.getElementById('sign-out').hidden = false;
  const filter = document.getElementById('namespace-filter');
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  filter.hidden = parts[0] === 'cr';
  try {
    if (parts[0] === 'cr' && parts.length === 5) await crPage(...parts.slice(1));
    else await home();
  } catch (e) {
    if (e.status !== 401) app.replaceChildren(h('p', { class: 'error', id: 'page-error', text: e.message }));
  }
}

document.getElementById('sign-out').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN);
  location.hash = '#/';
  login('');
});
const namespaceInput = document.getElementById('namespace');
namespaceInput.value = sessionStorage.getItem(NAMESPACE) || '';
namespaceInput.addEventListener('change', () => {
  sessionStorage.setItem(NAMESPACE, namespaceInput.value.trim());
  route();
});
window.addEventListener('hashchange', route);
route();
