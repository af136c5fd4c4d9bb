// Builds the page's DOM. Text from the API always goes in as text nodes or
// attribute values, never as markup: nothing in the dashboard parses HTML,
// so a job called <script> is shown as those characters.

// h('td', {class: 'num', title: 'x'}, child, 'text', [more]) → an element.
// Props: class, text (its textContent), on<event> (a listener), dataset,
// anything else an attribute. Children: nodes, or strings and numbers as
// text; null, undefined and false are skipped; arrays are flattened.
export function h(tag, props, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') {
      element.className = value;
    } else if (key === 'text') {
      element.textContent = String(value);
    } else if (key.startsWith('on')) {
      element.addEventListener(key.slice(2), value);
    } else if (key === 'dataset') {
      Object.assign(element.dataset, value);
    } else {
      if (key === 'href' && !/^[#/]/.test(String(value))) {
        throw new Error('links stay inside the dashboard: ' + value);
      }
      element.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

// Replaces the children of `element`.
export function fill(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

// A table: `columns` are header texts, `rows` arrays of cells (nodes or text).
// A cell may be {value, class} to set the cell's class. `empty` is shown as
// one wide row when there are no rows.
export function table(columns, rows, empty = 'none', props = {}) {
  const head = h('thead', null, h('tr', null, columns.map((c) => h('th', null, c))));
  const body = h('tbody');
  if (rows.length === 0) {
    body.append(h('tr', {class: 'empty'}, h('td', {colspan: columns.length}, empty)));
  }
  for (const row of rows) {
    body.append(h('tr', null, row.map((cell) => {
      if (cell !== null && typeof cell === 'object' && !(cell instanceof Node) &&
          !Array.isArray(cell)) {
        return h('td', {class: cell.class, title: cell.title}, cell.value);
      }
      return h('td', null, cell);
    })));
  }
  return h('table', props, head, body);
}

// A titled block of a page.
export function section(title, ...children) {
  return h('section', {class: 'card'}, h('h2', null, title), children);
}

// A list of term/definition pairs; pairs whose value is null or '' are left out.
export function facts(pairs) {
  const list = h('dl', {class: 'facts'});
  for (const [term, value] of pairs) {
    if (value === null || value === undefined || value === '') continue;
    list.append(h('dt', null, term), h('dd', null, value));
  }
  return list;
}

export function badge(state) {
  return h('span', {class: 'badge state-' + String(state).toLowerCase()}, state);
}
