import time, statistics
from r9k.registry import load_registry, ledger
from r9k.registry import gatedeps
reg = load_registry()
xs=[]
for i in range(5):
    gatedeps._direct.cache_clear()
    t=time.perf_counter(); ledger.gate_states(reg); xs.append(time.perf_counter()-t)
print("gate_states: median %.0f ms min %.0f" % (1000*statistics.median(xs), 1000*min(xs)))
