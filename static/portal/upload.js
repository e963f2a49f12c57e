// Upload forms marked data-upload-progress: send with XHR to show progress; without JS the
// form posts normally. Success follows the server's redirect; errors replace #upload-errors.
(function () {
  "use strict";
  function wire(form) {
    var box = form.querySelector(".progress");
    var bar = box && box.querySelector("progress");
    var text = box && box.querySelector(".progress-text");
    var errors = document.getElementById("upload-errors");
    var button = form.querySelector("button[type=submit]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var xhr = new XMLHttpRequest();
      xhr.open("POST", form.action);
      xhr.upload.addEventListener("progress", function (e) {
        if (!e.lengthComputable || !bar) return;
        var pct = Math.floor((e.loaded / e.total) * 100);
        bar.value = pct;
        text.textContent = pct + "%";
        form.dispatchEvent(new CustomEvent("upload:progress", { detail: pct }));
      });
      xhr.addEventListener("load", function () {
        if (xhr.status >= 200 && xhr.status < 300 && xhr.responseURL && xhr.responseURL !== form.action) {
          window.location.assign(xhr.responseURL);
          return;
        }
        var doc = new DOMParser().parseFromString(xhr.responseText, "text/html");
        var found = doc.getElementById("upload-errors");
        errors.innerHTML = found ? found.innerHTML : "Upload failed (HTTP " + xhr.status + ").";
        button.disabled = false;
        if (box) box.hidden = true;
      });
      xhr.addEventListener("error", function () {
        errors.textContent = "The upload was interrupted; nothing was kept. Try again.";
        button.disabled = false;
      });
      if (box) { box.hidden = false; bar.value = 0; text.textContent = "0%"; }
      errors.textContent = "";
      button.disabled = true;
      xhr.send(new FormData(form));
    });
  }
  document.querySelectorAll("form[data-upload-progress]").forEach(wire);
})();
