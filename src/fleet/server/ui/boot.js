// Runs before the dashboard's modules. A busy server may close a kept-alive
// connection just as the browser reuses it for one of the module files; the
// module graph then fails as a whole and the page would stay blank. The
// page reloads itself (at most 3 times in a row) when that happens.
(function () {
  var KEY = 'ferry.boot-retries';
  document.addEventListener('error', function (event) {
    var target = event.target;
    if (!target || target.id !== 'app-script') return;
    var tries = Number(sessionStorage.getItem(KEY) || '0');
    if (tries < 3) {
      sessionStorage.setItem(KEY, String(tries + 1));
      setTimeout(function () { location.reload(); }, 300 * (tries + 1));
    } else {
      sessionStorage.removeItem(KEY);
      var main = document.getElementById('main');
      if (main) {
        main.textContent = 'The dashboard could not load its scripts from the server; ' +
          'reload the page to try again.';
      }
    }
  }, true);
  window.ferryBooted = function () {
    sessionStorage.removeItem(KEY);
  };
})();
