// The site's search runs in a Web Worker, and a page opened from file:// may not start one
// (Chromium refuses a worker script to a page of an opaque origin). There, and only there, this
// replaces Worker with a hidden same-origin frame that runs the worker's script and passes the
// messages both ways, so that search works from disk without loading anything from elsewhere.
// (Material's offline plugin would add a shim from a CDN; a polyfill whose URL names
// "iframe-worker" takes its place: mkdocs.yml, extra.polyfills.)
(function () {
  "use strict";
  if (window.location.protocol !== "file:") {
    return;
  }

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.pending = [];
      this.frame = document.createElement("iframe");
      this.frame.hidden = true;
      document.body.appendChild(this.frame);
      const inner = this.frame.contentWindow;
      // The worker's script posts its answers with the global postMessage and listens for
      // "message" events on its global: both are the frame's window here.
      inner.postMessage = (data) => this.deliver(data);
      const script = inner.document.createElement("script");
      script.onload = () => {
        this.inner = inner;
        this.pending.splice(0).forEach((data) => this.postMessage(data));
      };
      script.onerror = () => this.dispatchEvent(new Event("error"));
      script.src = new URL(url, window.location.href).href;
      inner.document.head.appendChild(script);
    }

    postMessage(data) {
      if (!this.inner) {
        this.pending.push(data);
        return;
      }
      this.inner.dispatchEvent(new this.inner.MessageEvent("message", { data: data }));
    }

    deliver(data) {
      const event = new MessageEvent("message", { data: data });
      this.dispatchEvent(event);
      if (typeof this.onmessage === "function") {
        this.onmessage(event);
      }
    }

    terminate() {
      this.frame.remove();
    }
  }

  window.Worker = FrameWorker;
})();
