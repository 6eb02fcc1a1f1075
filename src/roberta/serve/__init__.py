"""`roberta serve`: the hub's calls behind HTTP JSON endpoints, a dynamic batcher, and a web page.

batcher   the queue and the worker that runs what has arrived together
endpoints what each endpoint reads, runs (one hub list call per round) and answers
app       the Starlette application: routes, body limit, one-line JSON errors
server    loading the runtime (torch or ONNX), /info, uvicorn
index.html the page at /, calling the same endpoints
"""
