// The reference for tests/unit/test_jsonata_reference.py: jsonata 2.0.6 run
// directly, with the functions Step Functions adds, on each case of
// tests/data/jsonata_reference.py (run it with --record; node is the wheel's).
//
// stdin: one case a line, {"x": expression, "b": bindings}; argv[2]: the clock
// in epoch ms, which $millis() and $now() answer. stdout: a header line, then
// one outcome a line, in order: {"v": value} | {"u": 1} (undefined) |
// {"s": "function" | "number"} (a value JSON cannot hold) | {"c": code, "m": message}.
'use strict';

const path = require('path');
const readline = require('readline');

const jsDir = path.resolve(__dirname, '..', '..', 'onceflow', 'local', 'jsonata_js');
const jsonata = require(path.join(jsDir, 'node_modules', 'jsonata'));
const aws = require(path.join(jsDir, 'aws_functions.js'));

function kindJsonCannotHold(value) {
  if (typeof value === 'function') {
    return 'function';
  }
  if (typeof value === 'number') {
    return Number.isFinite(value) ? null : 'number';
  }
  if (value === null || typeof value !== 'object') {
    return null;
  }
  if (value._jsonata_lambda || value._jsonata_function) {
    return 'function';
  }
  for (const child of Array.isArray(value) ? value : Object.values(value)) {
    const kind = kindJsonCannotHold(child);
    if (kind !== null) {
      return kind;
    }
  }
  return null;
}

async function outcome(text, bindings, clock, fromMillis) {
  try {
    const expression = jsonata(text);
    aws.install(expression);
    const fixed = Object.assign({}, bindings, {
      millis: () => clock,
      now: (picture, timezone) =>
        fromMillis.evaluate(undefined, { t: clock, p: picture, z: timezone }),
    });
    const value = await expression.evaluate(undefined, fixed);
    if (typeof value === 'undefined') {
      return { u: 1 };
    }
    const kind = kindJsonCannotHold(value);
    return kind === null ? { v: value } : { s: kind };
  } catch (err) {
    return {
      c: err && typeof err.code === 'string' ? err.code : null,
      m: err && typeof err.message === 'string' ? err.message : String(err),
    };
  }
}

async function main() {
  await aws.ready();
  const clock = Number(process.argv[2]);
  const fromMillis = jsonata('$fromMillis($t, $p, $z)');
  const out = [JSON.stringify({ jsonata: require(path.join(jsDir, 'node_modules', 'jsonata', 'package.json')).version })];
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === '') {
      continue;
    }
    const request = JSON.parse(line);
    out.push(JSON.stringify(await outcome(request.x, request.b || {}, clock, fromMillis)));
  }
  process.stdout.write(out.join('\n') + '\n');
}

main().catch((err) => {
  process.stderr.write(`${err && err.stack}\n`);
  process.exit(1);
});
