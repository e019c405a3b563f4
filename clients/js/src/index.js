// The overlay daemon's local socket API from JavaScript: see README.md.
export { API_VERSION, Client, Subscription, connect, defaultTarget } from './client.js';
export {
  BadFilter,
  BadFrame,
  BadRequest,
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
