// The dashboard's shell: sign-in state, the navigation bar, the hash router
// (#/overview, #/queues, #/jobs, #/jobs/<id>, #/nodes) and the live updates
// that refresh the open page.
import {ApiError, clearToken, setUnauthorizedHandler, token, whoami} from './api.js';
import {fill, h} from './dom.js';
import {time} from './format.js';
import {Live} from './live.js';
import * as jobPage from './job.js';
import * as jobsPage from './jobs.js';
import * as loginPage from './login.js';
import * as nodesPage from './nodes.js';
import * as overviewPage from './overview.js';
import * as queuesPage from './queues.js';

const PAGES = [
  {path: 'overview', title: 'Overview', module: overviewPage},
  {path: 'queues', title: 'Queues', module: queuesPage},
  {path: 'jobs', title: 'Jobs', module: jobsPage},
  {path: 'nodes', title: 'Nodes & pools', module: nodesPage},
];

const state = {me: null, page: null, live: null, mode: 'polling', returnTo: null};

const bar = document.getElementById('bar');
const main = document.getElementById('main');
const status = document.getElementById('status');

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ''));
  const [first, ...rest] = hash.split('/');
  if (first === 'jobs' && rest.length > 0 && rest[0] !== '') {
    return {name: 'job', module: jobPage, params: {id: rest[0]}};
  }
  const page = PAGES.find((p) => p.path === first);
  if (first === 'login') return {name: 'login', module: loginPage, params: {}};
  return page ? {name: page.path, module: page.module, params: {}} :
    {name: 'overview', module: overviewPage, params: {}};
}

function navigate(hash) {
  if (location.hash === hash) {
    show();
  } else {
    location.hash = hash;
  }
}

function renderBar(current) {
  if (!state.me) {
    fill(bar, h('span', {class: 'brand'}, 'Ferry fleet'));
    return;
  }
  const links = PAGES.map((p) => h('a', {href: '#/' + p.path,
    class: current === p.path || (current === 'job' && p.path === 'jobs') ? 'active' : null},
  p.title));
  const me = state.me;
  fill(bar,
      h('span', {class: 'brand'}, 'Ferry fleet'),
      h('nav', null, links),
      h('span', {class: 'who', id: 'who'}, me.user + ' · ' + me.tenant + '/' + me.team +
        ' · ' + me.role),
      h('button', {type: 'button', class: 'link', id: 'sign-out', onclick: signOut}, 'Sign out'));
}

function setStatus(text, isError) {
  fill(status, text);
  status.className = isError ? 'error' : '';
}

function describeError(error) {
  if (error instanceof ApiError) return error.message + ' (' + error.status + ')';
  return 'the server did not answer (' + (error && error.message ? error.message : error) + ')';
}

async function refreshPage() {
  const page = state.page;
  if (!page || !page.refresh) return;
  try {
    await page.refresh();
    if (page !== state.page) return;
    setStatus('Updated ' + time(new Date().toISOString()) + ' · ' +
      (state.mode === 'watch' ? 'live: watch stream' : 'live: polling every 2 s'), false);
  } catch (error) {
    if (page !== state.page) return;
    setStatus('Could not refresh: ' + describeError(error), true);
  }
}

function stopPage() {
  if (state.live) state.live.stop();
  state.live = null;
  if (state.page && state.page.unmount) state.page.unmount();
  state.page = null;
}

async function show() {
  stopPage();
  const target = route();
  if (!token() || !state.me) {
    if (target.name !== 'login') state.returnTo = location.hash || '#/overview';
    if (token() && !state.me) {
      try {
        state.me = await whoami();
      } catch (error) {
        if (!(error instanceof ApiError)) {
          renderBar(null);
          fill(main, h('p', {class: 'error'}, 'Could not reach the server: ' +
            describeError(error)));
          return;
        }
        clearToken();
      }
      if (state.me) return show();
    }
    renderBar(null);
    state.page = loginPage.mount(main, {onSignedIn});
    setStatus('', false);
    return;
  }
  if (target.name === 'login') return navigate('#/overview');
  renderBar(target.name);
  const context = {me: state.me, params: target.params, navigate,
    kick: () => state.live && state.live.kick()};
  state.page = target.module.mount(main, context);
  document.title = (state.page.title || 'Ferry') + ' · Ferry fleet';
  state.live = new Live(refreshPage, (mode) => {
    state.mode = mode;
  }, !!state.page.steady);
  state.live.start();
}

function onSignedIn(me) {
  state.me = me;
  const back = state.returnTo && state.returnTo !== '#/login' ? state.returnTo : '#/overview';
  state.returnTo = null;
  navigate(back);
}

function signOut() {
  clearToken();
  state.me = null;
  navigate('#/login');
}

setUnauthorizedHandler(() => {
  if (!state.me) return;
  clearToken();
  state.me = null;
  state.returnTo = location.hash;
  setTimeout(() => navigate('#/login'), 0);
});

window.addEventListener('hashchange', show);
if (window.ferryBooted) window.ferryBooted();
show();
