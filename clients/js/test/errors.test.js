// Every error code of the API contract maps to its typed error (no daemon needed).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { RequestError, StorageError, Timeout } from '../src/errors.js';

test('storage_error and timeout are typed, with the msg_id to publish again with', () => {
  const refused = RequestError.fromWire({ code: 'storage_error', message: 'disk full',
    msg_id: '0a' });
  assert.ok(refused instanceof StorageError);
  assert.equal(refused.code, 'storage_error');
  assert.equal(refused.extra.msg_id, '0a');
  assert.ok(RequestError.fromWire({ code: 'timeout', message: 'late' }) instanceof Timeout);
});
