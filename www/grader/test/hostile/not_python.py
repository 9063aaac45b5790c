# Attack: not Python at all (a syntax error), to see that the batch carries on.
# Expected: status error, with the compiler's message.
# expect-status: error
# expect-message: could not be compiled
}}}} this is not python {{{{
