// Errors of the overlay client: one class per error code of the API contract, so that
// callers can `catch (e) { if (e instanceof BadFilter) ... }` or switch on `e.code`.

/** Base of every error this client throws. */
export class OverlayError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}

/** The connection to the daemon could not be made, or was lost. */
export class ConnectionClosed extends OverlayError {
  /** @param {string} message @param {RequestError} [cause] the daemon's error push, if any */
  constructor(message, cause) {
    super(message);
    if (cause) this.cause = cause;
  }
}

/** The daemon answered a request (or one event of a batch) with an error. */
export class RequestError extends OverlayError {
  /**
   * @param {string} code one of the API's error codes (or an unknown one, kept as is)
   * @param {string} message
   * @param {Record<string, unknown>} [extra] any further fields of the error map
   */
  constructor(code, message, extra = {}) {
    super(`${code}: ${message}`);
    this.code = code;
    this.detail = message;
    this.extra = extra;
  }

  /** The typed error for an error map of the wire (`{code, message, ...}`). */
  static fromWire(error) {
    if (error === null || typeof error !== 'object') {
      return new Internal('internal', `malformed error ${String(error)}`);
    }
    const { code, message, ...extra } = error;
    const Class = ERRORS[code] ?? RequestError;
    return new Class(String(code), String(message), extra);
  }
}

export class BadFrame extends RequestError {}
export class BadRequest extends RequestError {}
export class BadFilter extends RequestError {
  /** 0-based character offset of the problem in the filter text. */
  get pos() {
    return this.extra.pos;
  }
}
export class UnknownSub extends RequestError {}
export class UnsupportedVersion extends RequestError {}
export class NotReady extends RequestError {}
export class Overloaded extends RequestError {}
export class TooLarge extends RequestError {}
/** A reliable publish was not acknowledged in time: publish again with `extra.msg_id`. */
export class Timeout extends RequestError {}
/** The topic's root could not store a reliable publish (`storage_error`): not acknowledged. */
export class StorageError extends RequestError {}
/** A durable subscribe named a consumer that exists with another filter or settings. */
export class Conflict extends RequestError {}
export class Internal extends RequestError {}

const ERRORS = {
  bad_frame: BadFrame,
  bad_request: BadRequest,
  bad_filter: BadFilter,
  unknown_sub: UnknownSub,
  unsupported_version: UnsupportedVersion,
  not_ready: NotReady,
  overloaded: Overloaded,
  too_large: TooLarge,
  timeout: Timeout,
  storage_error: StorageError,
  conflict: Conflict,
  internal: Internal,
};
