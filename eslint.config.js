// ESLint for web/: plain ES modules loaded by the browser with no build step. scripts/test
// installs it (package.json, package-lock.json) and runs `eslint` over web/ and this file.
import js from "@eslint/js";
import globals from "globals";

export default [
  {
    ignores: ["**/node_modules/", ".venv/", "test-artifacts/", ".room-data/", ".bench-cache/"],
  },
  js.configs.recommended,
  {
    files: ["web/**/*.js"],
    languageOptions: { ecmaVersion: "latest", sourceType: "module", globals: globals.browser },
  },
  {
    // The mention checker (tests/test_mentions_js.py) and this file run in node.
    files: ["web/**/*.mjs", "eslint.config.js"],
    languageOptions: { ecmaVersion: "latest", sourceType: "module", globals: globals.node },
  },
  {
    // `[^\x00-\x7f]` is how the resolver asks "outside ASCII" (shared/mentions/SPEC.md §5).
    files: ["web/mentions.js"],
    rules: { "no-control-regex": "off" },
  },
];
