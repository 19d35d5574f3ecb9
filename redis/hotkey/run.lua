-- The end of every script: one decision (see lease.lua).
return decide()
