// Drives the status page in a real browser: node browser.mjs URL
//
// Loads the page, waits for the running batch's progress bar, records its
// width, then waits until the page's own refresh (fetch, no reload) makes it
// grow. Exits 0 on success, 1 with a message otherwise.
//
// Environment: BATCHD_PLAYWRIGHT_DIR, the directory whose node_modules holds
// playwright-core (required); BATCHD_CHROMIUM, the browser (default
// /usr/bin/chromium); BATCHD_BATCH, the running batch's id (default b-running);
// BATCHD_CHART=0 skips the check of the tokens/s chart.
import { createRequire } from "node:module";
import path from "node:path";

const url = process.argv[2];
const batch = process.env.BATCHD_BATCH || "b-running";
const waitMs = 30000; // a guard against hangs, not a measurement

function fail(msg) {
  throw new Error(msg);
}

function exit(msg) {
  console.error("browser.mjs: " + msg);
  process.exit(1);
}

if (!url) exit("usage: node browser.mjs URL");
if (!process.env.BATCHD_PLAYWRIGHT_DIR) exit("BATCHD_PLAYWRIGHT_DIR is not set");
// ESM ignores NODE_PATH, so resolve playwright-core from where it was installed.
const require = createRequire(path.join(path.resolve(process.env.BATCHD_PLAYWRIGHT_DIR), "package.json"));
const { chromium } = require("playwright-core");

const browser = await chromium.launch({
  executablePath: process.env.BATCHD_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage();
  const pageErrors = [];
  page.on("pageerror", (err) => pageErrors.push(err.message));
  page.on("console", (msg) => { if (msg.type() === "error") pageErrors.push(msg.text()); });
  page.on("response", (r) => { if (r.status() >= 400) pageErrors.push(`${r.status()} for ${r.url()}`); });

  const resp = await page.goto(url, { timeout: waitMs });
  if (!resp.ok()) fail(`GET ${url}: ${resp.status()}`);

  const fill = `[data-batch="${batch}"] .bar-fill`;
  await page.waitForSelector(fill, { state: "attached", timeout: waitMs });
  const width = (sel) => parseFloat(document.querySelector(sel).style.width);
  const first = await page.evaluate(width, fill);
  if (!(first >= 0 && first <= 100)) fail(`bar width ${first}% is not a percentage`);

  // Mark this document: if the page reloaded instead of fetching, the mark is gone.
  await page.evaluate(() => { window.__batchdMark = true; });
  await page.waitForFunction(
    ([sel, w]) => parseFloat(document.querySelector(sel)?.style.width) > w,
    [fill, first],
    { timeout: waitMs },
  ).catch((err) => fail(`the bar of ${batch} stayed at ${first}%: ${err.message}`));
  const second = await page.evaluate(width, fill);
  if (!(await page.evaluate(() => window.__batchdMark === true))) fail("the page reloaded instead of refreshing in place");

  // The chart draws the sampler's history (unless BATCHD_CHART=0: a live
  // daemon's sampler has none in its first seconds).
  if (process.env.BATCHD_CHART !== "0") {
    const points = await page.evaluate(() => document.getElementById("chart-line").getAttribute("points").trim());
    if (!points) fail("the tokens/s chart has no points");
  }

  if (pageErrors.length) fail("errors in the page: " + pageErrors.join("; "));
  console.log(`bar of ${batch}: ${first}% -> ${second}%`);
} catch (err) {
  console.error("browser.mjs: " + err.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
