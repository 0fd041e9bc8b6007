"""What a run is asked and answers: the request and result, limits, error types, run ids,
background runs' limits, and what the sandbox needs from blob storage. The sandbox's bottom layer."""
