// Charts through Chart.js (Debian's libjs-chart.js, served by the server at
// /ui/vendor/chart.js). Without it a chart is a one-line note and the page's
// tables still carry every number.
import {h} from './dom.js';

export function chartsAvailable() {
  return typeof window.Chart === 'function';
}

const COLORS = ['#3b82f6', '#f59e0b', '#10b981', '#6366f1', '#ef4444', '#94a3b8', '#ec4899',
  '#14b8a6', '#a855f7'];

export function color(index) {
  return COLORS[index % COLORS.length];
}

// A chart of `type` ('line', 'bar', 'doughnut') that is updated in place.
export class ChartBox {
  constructor(type, options = {}) {
    this.element = h('div', {class: 'chart'});
    this.chart = null;
    if (!chartsAvailable()) {
      this.element.classList.add('no-chart');
      this.element.append('Charts need Chart.js on the server (Debian package libjs-chart.js); ' +
        'the tables show the same numbers.');
      return;
    }
    const canvas = h('canvas', {role: 'img', 'aria-label': options.label || type});
    this.element.append(canvas);
    this.chart = new window.Chart(canvas, {
      type,
      data: {labels: [], datasets: []},
      options: Object.assign({
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        plugins: {legend: {position: 'bottom'}},
      }, options.chart || {}),
    });
  }

  // `datasets`: [{label, data, ...Chart.js dataset options}].
  update(labels, datasets) {
    if (!this.chart) return;
    this.chart.data.labels = labels;
    this.chart.data.datasets = datasets;
    this.chart.update('none');
  }

  destroy() {
    if (this.chart) this.chart.destroy();
    this.chart = null;
  }
}
