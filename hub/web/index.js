// The demo's front page: links to the pages, and a one-line summary of the demo thread.

import { asText, byTestId, keepThreadInLinks, pageThread, startPage } from "./common.js";

keepThreadInLinks();
const summary = byTestId("summary");

startPage({
  thread: pageThread("demo"),
  render(client) {
    const state = client.state ?? {};
    const sections = Array.isArray(state.sections) ? state.sections.length : 0;
    const step = state.status && typeof state.status === "object" ? asText(state.status.step) : "?";
    summary.textContent =
      `“${asText(state.title)}”: ${sections} section(s), agent step ${step}, ` +
      `${client.messages.length} message(s), ${client.mirror.runId ? "a run is open" : "no run open"}.`;
  },
});
