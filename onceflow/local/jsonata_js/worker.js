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

function compile(text) {
  const expression = jsonata(text); // throws on a syntax error
  aws.install(expression);
  return expression;
}

function clockBindings(bindings, t) {
  const fixed = Object.assign({}, bindings);
  fixed.millis = () => t;
  fixed.now = (picture, timezone) => clockNow.evaluate(undefined, { t, p: picture, z: timezone });
  return fixed;
}

// Why a value cannot be carried as JSON, or null when it can.
function unsupported(value) {
  const pending = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'function') {
      return 'function';
    }
    if (typeof item === 'number') {
      if (!Number.isFinite(item)) {
        return 'number';
      }
    } else if (item !== null && typeof item === 'object') {
      if (item._jsonata_lambda || item._jsonata_function) {
        return 'function';
      }
      if (Array.isArray(item)) {
        for (const element of item) {
          pending.push(element);
        }
      } else {
        for (const key of Object.keys(item)) {
          pending.push(item[key]);
        }
      }
    }
  }
  return null;
}

async function answer(request) {
  const id = request.i;
  try {
    let expression = typeof request.k === 'number' ? compiled.get(request.k) : undefined;
    if (typeof expression === 'undefined') {
      if (typeof request.x !== 'string') {
        return { i: id, c: 'ONCEFLOW', m: `no expression ${request.k} here` };
      }
      expression = compile(request.x);
      if (typeof request.k === 'number') {
        compiled.set(request.k, expression);
      }
    }
    let bindings = request.b || {};
    if (typeof request.t === 'number') {
      bindings = clockBindings(bindings, request.t);
    }
    const result = await expression.evaluate(undefined, bindings);
    if (typeof result === 'undefined') {
      return { i: id, u: 1 };
    }
    const reason = unsupported(result);
    if (reason !== null) {
      return { i: id, s: reason };
    }
    return { i: id, v: result };
  } catch (err) {
    const code = err && typeof err.code === 'string' ? err.code : null;
    const message = err && typeof err.message === 'string' ? err.message : String(err);
    return { i: id, c: code, m: message };
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
    queue = queue.then(async () => {
      let reply;
      try {
        reply = await answer(JSON.parse(line));
      } catch (err) {
        reply = { i: null, c: 'ONCEFLOW', m: `unreadable request: ${err}` };
      }
      let text;
      try {
        text = JSON.stringify(reply);
      } catch (err) {
        // A value nested deeper than JSON.stringify's stack goes: the
        // evaluation fails with JavaScript's error; the worker lives on.
        text = JSON.stringify({ i: reply.i, c: null, m: err && err.message ? err.message : String(err) });
      }
      out.write(text + '\n');
    });
  });
  lines.on('close', () => {
    queue.then(() => process.exit(0));
  });
}

main().catch((err) => {
  process.stderr.write(`jsonata worker failed to start: ${err && err.stack}\n`);
  process.exit(1);
});
