// A scripted OpenAI-compatible endpoint on loopback for the page's client, the same scripts
// tests/endpoint.rs plays to the command line's client (its `Scripted`): `/v1/models` lists one
// model, and every POST gets the script's status and content type, then its pieces, each after
// its pause; `endless` sends the last piece again and again, as fast as it is read, until the
// client leaves; `strict` refuses (400) a request that carries the per-chunk counting fields, as
// OpenAI's API refuses arguments it does not know; `refuseLogprobs` refuses (400, naming it) a
// request that asks for log probabilities, as a server without them may. It sends CORS headers (the page is another
// origin) and counts the POSTs it was sent. It stops with the test file.
import { createServer } from 'node:http';

/**
 * @typedef {{ status: number, ctype?: string, pieces: [number, string][], endless?: boolean, strict?: boolean, refuseLogprobs?: boolean }} Script
 */

/** `data: {json}` and the blank line that ends an event. */
export const sse = (/** @type {string} */ json) => `data: ${json}\r\n\r\n`;
/** A chunk of `text` alone, no counts. */
export const content = (/** @type {string} */ text) =>
  sse(JSON.stringify({ choices: [{ delta: { content: text } }] }));

/**
 * Serve `script` on a free port of 127.0.0.1: `{ url, posts, first, close }` (`url` is the API's
 * base, ending in /v1; `posts` the bodies POSTed so far; `first.at` when the first came).
 * @param {Script} script
 */
export async function startHostile(script) {
  /** @type {string[]} */
  const posts = [];
  /** When the first POST came (ms since the epoch), 0 until then. */
  const first = { at: 0 };
  const server = createServer((request, response) => {
    const cors = {
      'access-control-allow-origin': '*',
      'access-control-allow-headers': 'content-type, authorization',
      'access-control-allow-methods': 'GET, POST, OPTIONS',
    };
    if (request.method === 'OPTIONS') {
      response.writeHead(204, cors).end();
      return;
    }
    if (request.method === 'GET' && request.url?.startsWith('/v1/models')) {
      response.writeHead(200, {
        ...cors,
        'content-type': 'application/json',
        server: 'scripted/1',
      });
      response.end(JSON.stringify({ object: 'list', data: [{ id: 'scripted', object: 'model' }] }));
      return;
    }
    let body = '';
    request.on('data', (chunk) => {
      body += chunk;
    });
    request.on('end', async () => {
      posts.push(body);
      first.at ||= Date.now();
      if (script.strict && body.includes('timings_per_token')) {
        response.writeHead(400, { ...cors, 'content-type': 'application/json' });
        response.end(
          JSON.stringify({
            error: {
              message: 'Unrecognized request argument supplied: timings_per_token',
              type: 'invalid_request_error',
            },
          }),
        );
        return;
      }
      if (script.refuseLogprobs && body.includes('"logprobs"')) {
        response.writeHead(400, { ...cors, 'content-type': 'application/json' });
        response.end(
          JSON.stringify({ error: { message: 'logprobs is not supported by this server' } }),
        );
        return;
      }
      const ctype =
        script.ctype ?? (script.status === 200 ? 'text/event-stream' : 'application/json');
      response.writeHead(script.status, { ...cors, 'content-type': ctype, server: 'scripted/1' });
      let open = true;
      response.on('close', () => {
        open = false;
      });
      for (const [pause, piece] of script.pieces) {
        if (pause) await new Promise((resolve) => setTimeout(resolve, pause));
        if (!open) return;
        response.write(piece);
      }
      const last = script.pieces.at(-1);
      if (script.endless && last) {
        // As fast as the client reads: write again whenever the socket drains.
        const more = () => {
          while (open && response.write(last[1]));
          if (open) response.once('drain', more);
        };
        more();
        return;
      }
      response.end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const address = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${address.port}/v1`,
    posts,
    first,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}
