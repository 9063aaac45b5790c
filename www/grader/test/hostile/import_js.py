# Attack: `import js` to reach the host's JavaScript global object (Node's process).
# Expected: the import is refused with a clear message; status error (loading failed).
# expect-status: error
# expect-message: cannot import `js`
import js
js.process.exit(0)
