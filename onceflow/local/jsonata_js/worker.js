// The local engine's JSONata evaluator: jsonata 2.0.6, the version Step Functions
// runs, with the functions Step Functions adds (aws_functions.js).
//
// It speaks JSON lines over stdin and stdout, one request at a time, in order:
//   {"i": id, "x": text, "k": key, "b": {bindings}, "t": clock ms}
// "x" is the expression's text; with a key, it is compiled once and later
// requests may send the key alone. "t" (optional) fixes $millis() and $now().
// The answer is one of:
//   {"i": id, "v": value}                     a JSON value
//   {"i": id, "u": 1}                         undefined (no value; not null)
//   {"i": id, "s": "function" | "number"}     a value JSON cannot hold
//   {"i": id, "c": code, "m": message}        an error, as jsonata reports it
// Text goes both ways as JSON, so a lone surrogate travels escaped ("\udc80").
'use strict';

const readline = require('readline');
const jsonata = require('jsonata');
const aws = require('./aws_functions');

const compiled = new Map(); // key: the compiled expression
let clockNow = null;

// Why a value cannot be carried as JSON, or null when it can (a loop, not
// recursion: a value may be nested deeper than node's stack goes).
function unsupported(value) {
  const pending = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'function' || (item && (item._jsonata_lambda || item._jsonata_function))) {
      return 'function';
    }
    if (typeof item === 'number' && !Number.isFinite(item)) {
      return 'number';
    }
    if (item !== null && typeof item === 'object') {
      for (const child of Array.isArray(item) ? item : Object.values(item)) {
        pending.push(child);
      }
    }
  }
  return null;
}

// An error as jsonata reports it (a JavaScript error has no code).
function failure(id, err) {
  const code = err && typeof err.code === 'string' ? err.code : null;
  const message = err && typeof err.message === 'string' ? err.message : String(err);
  return { i: id, c: code, m: message };
}

// The answer to one request line. One that is not JSON is answered without an id,
// which the caller takes for a worker out of step and ends it.
async function answer(line) {
  let id = null;
  try {
    const request = JSON.parse(line);
    id = request.i;
    let expression = compiled.get(request.k);
    if (typeof expression === 'undefined') {
      if (typeof request.x !== 'string') {
        return { i: id, c: 'ONCEFLOW', m: `no expression ${request.k} here` };
      }
      expression = jsonata(request.x); // throws on a syntax error
      aws.install(expression);
      if (typeof request.k === 'number') {
        compiled.set(request.k, expression);
      }
    }
    let bindings = request.b || {};
    const t = request.t;
    if (typeof t === 'number') {
      bindings = Object.assign({}, bindings, {
        millis: () => t,
        now: (picture, timezone) => clockNow.evaluate(undefined, { t, p: picture, z: timezone }),
      });
    }
    const result = await expression.evaluate(undefined, bindings);
    if (typeof result === 'undefined') {
      return { i: id, u: 1 };
    }
    const reason = unsupported(result);
    return reason === null ? { i: id, v: result } : { i: id, s: reason };
  } catch (err) {
    return failure(id, err);
  }
}

// The answer's line. A value nested deeper than JSON.stringify's stack goes fails
// the evaluation with JavaScript's error; the worker lives on.
function written(reply) {
  try {
    return JSON.stringify(reply);
  } catch (err) {
    return JSON.stringify(failure(reply.i, err));
  }
}

async function main() {
  await aws.ready();
  clockNow = jsonata('$fromMillis($t, $p, $z)');
  const out = process.stdout;
  out.write(JSON.stringify({
    ready: { jsonata: require('jsonata/package.json').version, node: process.version },
  }) + '\n');
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let queue = Promise.resolve();
  lines.on('line', (line) => {
    // One at a time: jsonata keeps each compiled expression's clock in a
    // closure, so two evaluations of one expression must not interleave.
    queue = queue.then(async () => out.write(written(await answer(line)) + '\n'));
  });
  lines.on('close', () => {
    queue.then(() => process.exit(0));
  });
}

main().catch((err) => {
  process.stderr.write(`jsonata worker failed to start: ${err && err.stack}\n`);
  process.exit(1);
});
