// The page's service worker, for hosts that send no COOP/COEP headers (a static host: GitHub
// Pages, a university's web space, `python3 -m http.server`): it answers the site's own requests
// with the headers that make the page cross-origin isolated, which the CPU engine's threads need
// (shared memory between workers). www/isolate.js installs it and reloads the page once.
//
// Network first: every answer is the host's, revalidated (`no-cache`), so a site published again
// is never a mix of old and new engine builds. A copy of the page and the engine builds it ran is
// kept under the site's version (`make site` writes its hash below; a new version's worker drops
// the old copies), for a visit without the network: the page and the shipped stories260K then
// still run (the models' own files are kept by the page itself, www/download.js). A request to
// another origin (a model kept on another host) is not touched at all.

const VERSION = 'dev';
const KEPT = `tokenometer-site-${VERSION}`;

// The shipped model, so that it runs on a visit without the network even if it never ran before.
const SHIPPED = ['models/stories260K/stories260K.bin', 'models/stories260K/tok512.bin'];

/** This script's global: a service worker's (tsconfig.sw.json checks it as one). */
const sw = /** @type {ServiceWorkerGlobalScope} */ (/** @type {unknown} */ (self));

sw.addEventListener('install', (event) => {
  sw.skipWaiting();
  event.waitUntil(
    caches
      .open(KEPT)
      .then((cache) => cache.addAll(SHIPPED))
      .catch(() => {}),
  );
});
sw.addEventListener('activate', (event) =>
  event.waitUntil(
    (async () => {
      for (const name of await caches.keys()) {
        if (name.startsWith('tokenometer-site-') && name !== KEPT) await caches.delete(name);
      }
      await sw.clients.claim();
    })(),
  ),
);

sw.addEventListener('fetch', (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== 'GET' || url.origin !== sw.location.origin) return;
  event.respondWith(isolated(event, request, url));
});

/** The page's own files and stories260K, kept for a visit without the network; the other models are the page's to keep. */
const keeps = (/** @type {URL} */ url) =>
  !url.pathname.includes('/models/') ||
  /\/models\/(catalog\.json$|stories260K\/)/.test(url.pathname);

/** The host's answer to `request` (or, without the network, the kept copy), with the headers of a cross-origin isolated page. */
async function isolated(event, request, url) {
  // A page is kept by its path (its query is the visitor's settings).
  const key = request.mode === 'navigate' ? `${url.origin}${url.pathname}` : request;
  let response;
  let fresh = true;
  try {
    // A navigation's request cannot be copied with other options; everything else is revalidated.
    response = await (request.mode === 'navigate'
      ? fetch(request)
      : fetch(request, { cache: 'no-cache' }));
  } catch (e) {
    const kept = await caches.open(KEPT).then((cache) => cache.match(key));
    if (!kept) throw e;
    response = kept;
    fresh = false;
  }
  if (response.type === 'opaque' || response.type === 'opaqueredirect') return response;
  if (fresh && response.status === 200 && keeps(url)) {
    const copy = response.clone();
    event.waitUntil(
      caches
        .open(KEPT)
        .then((cache) => cache.put(key, copy))
        .catch(() => {}),
    );
  }
  const headers = new Headers(response.headers);
  headers.set('Cross-Origin-Opener-Policy', 'same-origin');
  headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
  headers.set('Cross-Origin-Resource-Policy', 'same-origin');
  return new Response(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers,
  });
}
