// The page's service worker, for hosts that send no COOP/COEP headers (a static host: GitHub
// Pages, a university's web space, `python3 -m http.server`): it answers the site's own requests
// from the network with the headers that make the page cross-origin isolated, which the CPU
// engine's threads need (shared memory between workers). www/isolate.js installs it and reloads
// the page once. It keeps nothing: every answer is the host's, asked again each time
// (`no-cache`, so a site published again is never a mix of old and new engine builds), and a
// request to another origin (a model kept on another host) is not touched at all.

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (event) => {
  const request = event.request;
  if (request.method !== 'GET' || new URL(request.url).origin !== self.location.origin) return;
  event.respondWith(isolated(request));
});

/** The host's answer to `request`, with the headers of a cross-origin isolated page. */
async function isolated(request) {
  // A navigation's request cannot be copied with other options; everything else is revalidated.
  const response = await (request.mode === 'navigate' ? fetch(request) : fetch(request, { cache: 'no-cache' }));
  if (response.type === 'opaque' || response.type === 'opaqueredirect') return response;
  const headers = new Headers(response.headers);
  headers.set('Cross-Origin-Opener-Policy', 'same-origin');
  headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
  headers.set('Cross-Origin-Resource-Policy', 'same-origin');
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}
