// Static server for the page: www/ at /, pkg/ at /pkg/, the models folder at /models/.
// It sends the headers a wasm app wants: application/wasm, and COOP/COEP so that the page is
// cross-origin isolated (precise timers).
// Usage: node www/serve.mjs [SITE]  (PORT=8080, HOST=127.0.0.1, MODELS=models; SITE: a folder
// `make site` wrote, served whole, as `make serve` does)
// As a module: staticServer(mounts) serves other folders too (tests/bench/browser.mjs does).
import { createServer } from 'node:http';
import { createReadStream, promises as fs } from 'node:fs';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const port = Number(process.env.PORT || 8080);
const host = process.env.HOST || '127.0.0.1';
/** The page's folders, by URL prefix; `extra` mounts come first. */
export function pageMounts(extra = []) {
  return [
    ...extra,
    ['/pkg/', resolve(root, 'pkg')],
    ['/models/', resolve(root, process.env.MODELS || 'models')],
    ['/', resolve(root, 'www')],
  ];
}
const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.bin': 'application/octet-stream',
  '.txt': 'text/plain; charset=utf-8',
};

async function resolvePath(mounts, urlPath) {
  for (const [prefix, dir] of mounts) {
    if (!urlPath.startsWith(prefix)) continue;
    const file = normalize(join(dir, decodeURIComponent(urlPath.slice(prefix.length))));
    if (file !== dir && !file.startsWith(dir + sep)) return null;
    const stat = await fs.stat(file).catch(() => null);
    if (stat?.isDirectory())
      return resolvePath(mounts, urlPath.replace(/\/?$/, '/') + 'index.html');
    return stat?.isFile() ? { file, size: stat.size } : null;
  }
  return null;
}

/** An HTTP server for `mounts` ([URL prefix, folder] pairs), not yet listening. */
export function staticServer(mounts) {
  return createServer(async (req, res) => {
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'Cache-Control': 'no-cache',
    };
    const path = new URL(req.url, 'http://x').pathname;
    const found = await resolvePath(mounts, path).catch(() => null);
    if (!found) {
      res.writeHead(404, { ...headers, 'Content-Type': 'text/plain' });
      return res.end(`not found: ${path}\n`);
    }
    res.writeHead(200, {
      ...headers,
      'Content-Type': types[extname(found.file)] || 'application/octet-stream',
      'Content-Length': found.size,
    });
    if (req.method === 'HEAD') return res.end();
    createReadStream(found.file).pipe(res);
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  // A folder named on the command line (`make site`'s site/) is the whole page; else the checkout's.
  const mounts = process.argv[2] ? [['/', resolve(process.argv[2])]] : pageMounts();
  const server = staticServer(mounts);
  server.listen(port, host, () => {
    const models = process.argv[2] ? join(mounts[0][1], 'models') : mounts[1][1];
    console.log(
      `tokenometer: serving on http://${host}:${/** @type {import('node:net').AddressInfo} */ (server.address()).port}/ (models from ${models})`,
    );
  });
}
