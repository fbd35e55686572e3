// Threads on a host that sends no COOP/COEP headers: where this page is not cross-origin isolated,
// install the site's service worker (www/sw.js, which adds those headers to the site's own
// answers) and reload once, so that the second load is isolated. Without service workers (a
// private window in some browsers, a page not served over https or from localhost) the page runs
// one thread and says why (www/threads.js). A classic script, run before the page's modules.
(() => {
  const RELOADED = 'tokenometer-isolation-reloaded';
  if (self.crossOriginIsolated) {
    sessionStorage.removeItem(RELOADED);
    return;
  }
  if (!('serviceWorker' in navigator) || !self.isSecureContext) return;
  navigator.serviceWorker.register('sw.js', { updateViaCache: 'none' }).then(
    (registration) => {
      // Reloaded once already and still not isolated: the worker cannot help here (threads.js says so).
      if (sessionStorage.getItem(RELOADED)) return;
      const worker = registration.installing ?? registration.waiting ?? registration.active;
      const reload = () => {
        sessionStorage.setItem(RELOADED, '1');
        location.reload();
      };
      if (worker?.state === 'activated') reload();
      else worker?.addEventListener('statechange', () => worker.state === 'activated' && reload());
    },
    (e) =>
      console.warn(
        `tokenometer: the service worker that gives this page threads did not install: ${e}`,
      ),
  );
})();
