// The daemon's size limits (docs/API.md, "Sizes"), as its hello tells them: an event over
// them is refused here, with the TooLarge the daemon would answer, before it is sent.
import { TooLarge } from './errors.js';
import { DEFAULT_MAX_FRAME } from './frames.js';

/**
 * An event's size as the API counts it: payload bytes, the topic's UTF-8 bytes, and per
 * attribute its name's UTF-8 bytes and its value's (text: UTF-8 bytes; boolean: 1;
 * integer and float: 8).
 * @param {string} topic
 * @param {Record<string, unknown>} attrs
 * @param {Uint8Array | undefined} payload
 */
export function eventSize(topic, attrs, payload) {
  let size = (payload?.length ?? 0) + Buffer.byteLength(topic, 'utf8');
  for (const name in attrs) {
    const value = attrs[name];
    size += Buffer.byteLength(name, 'utf8')
      + (typeof value === 'string' ? Buffer.byteLength(value, 'utf8')
        : typeof value === 'boolean' ? 1 : 8);
  }
  return size;
}

export class SizeLimits {
  /**
   * @param {Record<string, unknown>} hello the hello reply ({} before it came): a missing
   *   max_frame is the default; a missing max_event or max_payload is not checked here
   */
  constructor(hello) {
    const limit = (name) => (Number.isInteger(hello[name]) ? hello[name] : Infinity);
    this.maxFrame = Number.isInteger(hello.max_frame) ? hello.max_frame : DEFAULT_MAX_FRAME;
    this.maxEvent = limit('max_event');
    this.maxPayload = limit('max_payload');
  }

  /**
   * The error refusing an event over `max_payload` or `max_event` (both inclusive), as
   * the daemon words it; null when the event fits.
   * @param {{topic: string, attrs: Record<string, unknown>, payload?: Uint8Array}} event
   */
  refusal(event) {
    const payload = event.payload?.length ?? 0;
    if (payload > this.maxPayload) {
      return this.tooLarge(`payload of ${payload} bytes is over the limit of `
        + `${this.maxPayload} (max_payload)`);
    }
    const size = eventSize(event.topic, event.attrs, event.payload);
    if (size > this.maxEvent) {
      return this.tooLarge(`event of ${size} bytes (payload, topic and attributes) is over `
        + `the limit of ${this.maxEvent} (max_event)`);
    }
    return null;
  }

  /** A request frame of `size` body bytes over `max_frame`: never sent. */
  frameRefusal(size) {
    return size > this.maxFrame ? this.tooLarge(`a request of ${size} bytes exceeds the `
      + `daemon's max_frame of ${this.maxFrame}`) : null;
  }

  tooLarge(message) {
    return new TooLarge('too_large', message, { max_frame: this.maxFrame,
      max_event: this.maxEvent, max_payload: this.maxPayload });
  }
}
