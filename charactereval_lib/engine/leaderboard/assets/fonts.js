// Chinese text (names, contexts, replies) needs a CJK font; without one the browser draws empty
// boxes and nothing else says so. A Chinese character drawn in the page's font stack looks the
// same as a code point no font has (U+10FFFD) exactly when no installed font has the character.
(function () {
  "use strict";
  const notice = document.getElementById("no-cjk-font");
  if (!notice) return;
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 48;
  const context = canvas.getContext("2d");
  if (!context) return;
  context.font = "40px " + getComputedStyle(document.body).fontFamily;
  context.textBaseline = "top";
  const pixels = (text) => {
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.fillText(text, 0, 0);
    return context.getImageData(0, 0, canvas.width, canvas.height).data.join(",");
  };
  notice.hidden = pixels("\u4e2d") !== pixels("\u{10FFFD}");
})();
