// The overlay daemon's local socket API from JavaScript: see README.md.
export { API_VERSION, Client, connect, defaultTarget } from './client.js';
export { DurableEvent, DurableSubscription } from './durable.js';
export { Subscription } from './subscription.js';
export {
  BadFilter,
  BadFrame,
  BadRequest,
  Conflict,
  ConnectionClosed,
  Internal,
  NotReady,
  OverlayError,
  Overloaded,
  RequestError,
  StorageError,
  Timeout,
  TooLarge,
  UnknownSub,
  UnsupportedVersion,
} from './errors.js';
