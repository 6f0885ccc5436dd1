// The functions Step Functions adds to JSONata 2.0.6, and the one it takes away
// ("Transforming data with JSONata in Step Functions", AWS Step Functions
// Developer Guide). Shared by the engine's worker (worker.js) and the recorder of
// reference results (tests/data/jsonata_reference.js), so both evaluate the
// dialect AWS runs.
'use strict';

const crypto = require('crypto');
const jsonata = require('jsonata');

// $partition and $range as JSONata functions, the way moto and LocalStack
// declare them: LocalStack recorded them against AWS ($partition([0,1,2,3], 3)
// is [[0,1,2],[3]]; $range(1, 9, 9) is the number 1, a singleton sequence, not
// [1], which only a JSONata-level definition gives).
const PARTITION = `function($array, $chunk_size) {
  $chunk_size = 0 ? null :
  $chunk_size >= $count($array) ? [[$array]] :
  $map(
    [0..$floor($count($array) / $chunk_size) - (1 - $count($array) % $chunk_size)],
    function($i) {
      $filter($array, function($v, $index) {
        $index >= $i * $chunk_size and $index < ($i + 1) * $chunk_size
      })
    }
  )
}`;

const RANGE = `function($first, $last, $step) {
  $first > $last and $step > 0 ? [] :
  $first < $last and $step < 0 ? [] :
  $map([0..$floor(($last - $first) / $step)], function($i) { $first + $i * $step })
}`;

const HASH_ALGORITHMS = ['MD5', 'SHA-1', 'SHA-256', 'SHA-384', 'SHA-512'];

// $hash(value, algorithm): the hex digest of the UTF-8 bytes of a string.
function hash(value, algorithm) {
  if (typeof value === 'undefined') {
    return undefined; // as JSONata's own string functions treat a missing argument
  }
  if (!HASH_ALGORITHMS.includes(algorithm)) {
    throw new Error(`$hash: the algorithm must be one of ${HASH_ALGORITHMS.join(', ')}`);
  }
  const name = algorithm.replace('-', '').toLowerCase(); // node's: md5, sha1, sha256, ...
  return crypto.createHash(name).update(value, 'utf8').digest('hex');
}

// $random([seed]): with a seed, java.util.Random(seed).nextDouble(), which is what
// AWS answers ($random(42) is 0.7275636800328681 there); without, Math.random().
const MULTIPLIER = 0x5DEECE66Dn;
const MASK = (1n << 48n) - 1n;

function random(seed) {
  if (typeof seed === 'undefined') {
    return Math.random();
  }
  let state = (BigInt.asIntN(64, BigInt(Math.trunc(seed))) ^ MULTIPLIER) & MASK;
  const next = (bits) => {
    state = (state * MULTIPLIER + 0xBn) & MASK;
    return state >> (48n - bits);
  };
  const high = next(26n);
  const low = next(27n);
  return Number((high << 27n) + low) / 2 ** 53;
}

// $parse(text): JSON.parse, so text that is not JSON is an error (a BOM, say).
function parse(text) {
  return typeof text === 'undefined' ? undefined : JSON.parse(text);
}

function notAFunction() {
  throw { code: 'T1006', stack: new Error().stack };
}

let lambdas = null;

// Compile the JSONata-level functions once; call before install().
async function ready() {
  if (lambdas === null) {
    lambdas = {
      partition: await jsonata(PARTITION).evaluate(undefined),
      range: await jsonata(RANGE).evaluate(undefined),
    };
  }
}

// Bind the dialect into one compiled expression's environment.
function install(expression) {
  expression.registerFunction('hash', hash, '<ss:s>');
  expression.registerFunction('random', random, '<n?:n>');
  expression.registerFunction('uuid', () => crypto.randomUUID(), '<:s>'); // version 4
  expression.registerFunction('parse', parse, '<s-:x>');
  expression.assign('partition', lambdas.partition);
  expression.assign('range', lambdas.range);
  // "$eval is not available; use $parse": calling it fails as calling any name
  // that is not a function does.
  expression.registerFunction('eval', notAFunction);
}

module.exports = { ready, install };
