# Attack: GeneratorExit raised while loading.
# Expected: caught; status error with the exception named.
# expect-status: error
# expect-message: GeneratorExit
raise GeneratorExit("bye")
