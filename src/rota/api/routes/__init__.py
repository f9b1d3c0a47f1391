"""The API's routers, one module per resource; :func:`rota.api.app.create_app` mounts them."""
