// `make site`: the one folder a static host publishes (GitHub Pages, Netlify, a university's web
// space, S3, `python3 -m http.server`), at any path: the page (www/, every URL in it relative),
// the engine's three builds (pkg/, pkg/relaxed/, pkg/threads/), the shipped stories260K, and the
// catalog's models cut in parts of at most 25 MB (GitHub Pages refuses files of 100 MB,
// Cloudflare Pages of 25 MiB), each part pinned by its sha-256 in the site's models/catalog.json;
// the page reads the parts in order as one file and checks each (www/worker.js). Threads come
// from the page's service worker (www/sw.js), on hosts that send no headers.
//
// Usage: node www/site.mjs [OUT]  (OUT: site)
//   MODELS       the models folder (models); its catalog.json names the models, `make models`
//                fetched them into its cache/
//   SITE_MODELS  default (the catalog's default model, SmolLM2-135M-Instruct), all, or none
//                (stories260K alone)
//   SITE_EXTRA   a JSON file of more catalog entries, models kept on another host:
//                [{ "id", "label", "license", "chat", "prompt", "url", "bytes", "sha256" }]
// `make serve` serves the folder this writes (www/serve.mjs site), and so can `tokenometer serve
// --page site`: one layout.
import { createHash } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const out = resolve(process.argv[2] || 'site');
const models = resolve(root, process.env.MODELS || 'models');
const which = process.env.SITE_MODELS || 'default';
/** The most bytes in one file of the site (25 MB: under Cloudflare Pages' 25 MiB and GitHub's 100 MB). */
export const PART_BYTES = 25_000_000;
// The page's files: what www/index.html loads, and nothing of the tools beside it (*.mjs).
const PAGE = /^(index\.html|style\.css|[a-z-]+\.js)$/;
const BUILDS = ['', 'relaxed', 'threads'];
const SHIPPED = ['stories260K.bin', 'tok512.bin', 'stories260K-q8_0.gguf', 'README.md'];

const fail = (/** @type {string} */ why) => {
  console.error(`make site: ${why}`);
  process.exit(1);
};

/** Copy `from` (a file or a folder) to `to`. */
const copy = (/** @type {string} */ from, /** @type {string} */ to) =>
  fs.cp(from, to, { recursive: true });

/** The sha-256 of `file`'s bytes from `start`, `length` of them (hex). */
async function sha256(file, start = 0, length = Infinity) {
  const hash = createHash('sha256');
  const end = length === Infinity ? undefined : start + length - 1;
  for await (const chunk of createReadStream(file, { start, end })) hash.update(chunk);
  return hash.digest('hex');
}

/** Every file under `dir`. */
async function files(dir) {
  const found = [];
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...(await files(path)));
    else found.push(path);
  }
  return found;
}

/** Cut `file` into parts of at most PART_BYTES named `prefix.partNN` under `dir`; their entries. */
async function cut(file, dir, prefix, bytes) {
  const parts = [];
  const handle = await fs.open(file);
  try {
    for (let start = 0, i = 0; start < bytes; start += PART_BYTES, i += 1) {
      const length = Math.min(PART_BYTES, bytes - start);
      const name = `${prefix}.part${String(i).padStart(2, '0')}`;
      const buffer = Buffer.alloc(length);
      await handle.read(buffer, 0, length, start);
      await fs.writeFile(join(out, 'models', dir, name), buffer);
      parts.push({
        file: `${dir}/${name}`,
        bytes: length,
        sha256: createHash('sha256').update(buffer).digest('hex'),
      });
    }
  } finally {
    await handle.close();
  }
  return parts;
}

/** A catalog entry kept on another host, checked for what the page needs. */
function remoteEntry(/** @type {any} */ e) {
  const id =
    typeof e?.id === 'string' && /^[A-Za-z0-9._-]+$/.test(e.id)
      ? e.id
      : fail(
          `SITE_EXTRA: an entry's id is missing or not letters, digits, dots and dashes: ${JSON.stringify(e?.id)}`,
        );
  let url;
  try {
    url = new URL(e.url);
  } catch {
    fail(`SITE_EXTRA: ${id}'s url is not an absolute URL: ${JSON.stringify(e.url)}`);
  }
  if (url.protocol !== 'https:' && url.hostname !== '127.0.0.1' && url.hostname !== 'localhost')
    fail(`SITE_EXTRA: ${id}'s url must be https (a page on https cannot fetch http): ${e.url}`);
  if (!/^[0-9a-f]{64}$/i.test(e.sha256 ?? ''))
    fail(`SITE_EXTRA: ${id} needs the file's sha-256 (64 hex digits) to check the download`);
  if (!Number.isSafeInteger(e.bytes) || e.bytes <= 0)
    fail(
      `SITE_EXTRA: ${id} needs the file's length in bytes (the page says it before downloading)`,
    );
  const { label = id, license = 'license not given', chat = false, prompt } = e;
  return {
    id,
    label,
    license,
    chat: Boolean(chat),
    ...(typeof prompt === 'string' ? { prompt } : {}),
    default: false,
    url: url.href,
    bytes: e.bytes,
    sha256: e.sha256.toLowerCase(),
  };
}

/** MODELS's catalog, once the folder is known to hold what the site needs (else one sentence). */
async function modelsCatalog() {
  const given = process.env.MODELS || 'models';
  const at = `MODELS=${given}${resolve(given) === given ? '' : ` (${models})`}`;
  if (!(await fs.stat(models).catch(() => null))?.isDirectory())
    fail(
      `${at} is not a folder: give a folder laid out as models/ is, or leave MODELS out for the checkout's`,
    );
  const needed = [...SHIPPED.map((name) => `stories260K/${name}`), 'catalog.json'];
  const missing = [];
  for (const name of needed)
    if (!(await fs.stat(join(models, name)).catch(() => null))) missing.push(name);
  if (missing.length)
    fail(
      `${at} lacks ${missing.join(', ')}: the site needs the shipped stories260K and catalog.json as models/ holds them (copy them there, or leave MODELS out for the checkout's)`,
    );
  let catalog;
  try {
    catalog = JSON.parse(await fs.readFile(join(models, 'catalog.json'), 'utf8'));
  } catch (e) {
    fail(
      `${join(models, 'catalog.json')} is not JSON (${e instanceof Error ? e.message : e}): restore it from the checkout's models/catalog.json`,
    );
  }
  const fields = ['id', 'label', 'file', 'bytes', 'sha256'];
  if (
    !Array.isArray(catalog?.models) ||
    !catalog.models.every((/** @type {any} */ m) => fields.every((f) => m?.[f] !== undefined))
  ) {
    fail(
      `${join(models, 'catalog.json')} needs a "models" list whose entries each have ${fields.join(', ')}: restore it from the checkout's models/catalog.json`,
    );
  }
  return catalog;
}

async function main() {
  if (!(await fs.stat(join(root, 'pkg', 'tokenometer.js')).catch(() => null)))
    fail('pkg/ has no engine build: run make pkg first');
  if (!['default', 'all', 'none'].includes(which))
    fail(`SITE_MODELS=${which} is not a choice (default, all or none)`);
  const catalog = await modelsCatalog();
  await fs.rm(out, { recursive: true, force: true });
  await fs.mkdir(join(out, 'models', 'stories260K'), { recursive: true });
  for (const name of await fs.readdir(join(root, 'www'))) {
    if (PAGE.test(name)) await copy(join(root, 'www', name), join(out, name));
  }
  for (const build of BUILDS) {
    const from = join(root, 'pkg', build);
    if (!(await fs.stat(join(from, 'tokenometer.js')).catch(() => null))) {
      console.warn(
        `make site: no pkg/${build} build (the page gives way to the next: ${build === 'threads' ? 'one thread' : 'the baseline build'})`,
      );
      continue;
    }
    for (const name of ['tokenometer.js', 'tokenometer_bg.wasm', 'snippets']) {
      if (await fs.stat(join(from, name)).catch(() => null))
        await copy(join(from, name), join(out, 'pkg', build, name));
    }
  }
  // The site's version, for its service worker's kept copy: a hash of the page and the builds.
  const version = createHash('sha256');
  for (const file of (await files(out)).sort())
    version.update(relative(out, file)).update(await fs.readFile(file));
  const sw = join(out, 'sw.js');
  await fs.writeFile(
    sw,
    (await fs.readFile(sw, 'utf8')).replace(
      "const VERSION = 'dev';",
      `const VERSION = '${version.digest('hex').slice(0, 16)}';`,
    ),
  );
  for (const name of SHIPPED)
    await copy(join(models, 'stories260K', name), join(out, 'models', 'stories260K', name));

  const entries = [];
  for (const m of catalog.models.filter(
    (m) => which === 'all' || (which === 'default' && m.default),
  )) {
    const file = join(models, m.file);
    const stat = await fs.stat(file).catch(() => null);
    if (!stat) {
      console.warn(
        `make site: ${m.file} is not in ${models} (python3 models/fetch.py ${m.id} fetches it): the site goes without ${m.label}`,
      );
      continue;
    }
    if (stat.size !== m.bytes || (await sha256(file)) !== m.sha256)
      fail(
        `${file} is not the file the catalog names (its length or sha-256 differs): fetch it again with python3 models/fetch.py ${m.id}`,
      );
    await fs.mkdir(join(out, 'models', m.id), { recursive: true });
    const split = await cut(file, m.id, basename(m.file), m.bytes);
    const license = m.license_file && join(models, m.license_file);
    if (license && !(await fs.stat(license).catch(() => null)))
      fail(
        `${license} is missing, and ${m.label}'s license travels with it: restore it from the checkout's models/${m.license_file}`,
      );
    if (license) await copy(license, join(out, 'models', m.id, basename(license)));
    entries.push({
      id: m.id,
      label: m.label,
      architecture: m.architecture,
      license: m.license,
      ...(license ? { license_file: `${m.id}/${basename(license)}` } : {}),
      chat: m.chat,
      ...(m.prompt ? { prompt: m.prompt } : {}),
      default: m.default,
      bytes: m.bytes,
      sha256: m.sha256,
      split,
    });
  }
  if (process.env.SITE_EXTRA) {
    const extra = JSON.parse(await fs.readFile(process.env.SITE_EXTRA, 'utf8'));
    if (!Array.isArray(extra)) fail('SITE_EXTRA must hold a JSON list of catalog entries');
    entries.push(...extra.map(remoteEntry));
  }
  await fs.writeFile(
    join(out, 'models', 'catalog.json'),
    `${JSON.stringify(
      {
        about:
          'The models of this site (make site, www/site.mjs): `split` files are here in parts of at most 25 MB, read in order as one file; `url` files are kept on another host. Each is checked by its sha-256 as it arrives.',
        models: entries,
      },
      null,
      1,
    )}\n`,
  );
  await copy(join(root, 'docs', 'site.md'), join(out, 'README.md'));
  const sizes = await Promise.all((await files(out)).map(async (f) => (await fs.stat(f)).size));
  const bytes = sizes.reduce((a, b) => a + b, 0);
  const largest = Math.max(...sizes);
  console.log(
    `make site: ${out} (${(bytes / 1e6).toFixed(1)} MB, largest file ${(largest / 1e6).toFixed(1)} MB; models: stories260K${entries.map((e) => `, ${e.id}`).join('')}). Publish the folder as it is; docs/site.md says how.`,
  );
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await main();
}
