"""`roberta serve`: the hub's calls behind HTTP JSON endpoints, a dynamic batcher, and a web page.

batcher   the queue and the worker that runs what has arrived together
shapes    what each endpoint reads, declared once (the parsing and the OpenAPI document follow it)
endpoints how each endpoint's requests are read, run (one hub list call per round) and answered
app       the Starlette application: routes, body limit, one-line JSON errors, the middleware
auth      the accepted API keys, and the 401 for a request without one
metrics   /metrics: Prometheus counters, histograms and the queue gauge, a registry per app
observe   each request timed into the metrics and logged in one line
openapi   /openapi.json: the served paths, their requests and answers
server    loading the runtime (torch or ONNX), /info, uvicorn
index.html the page at /, calling the same endpoints (with the key, when one is asked for)
"""
