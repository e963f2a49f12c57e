// Page fragments answer a refused action with its 4xx status and the error in the fragment;
// inside [data-htmx-swap-errors], swap those in (htmx 2 does not swap 4xx responses by default).
document.addEventListener("htmx:beforeSwap", function (event) {
  var status = event.detail.xhr.status;
  if (status >= 400 && status < 500 && event.detail.elt.closest("[data-htmx-swap-errors]")) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
